"""One scheduler, two clocks: the virtual and real-time drivers must give the same timeline."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastmode.backends.drivers import (
    Arrival,
    PoolHandle,
    RealtimeFleet,
    RealtimeReplica,
    VirtualDriver,
)
from fastmode.backends.engine import DeploymentSpec, EngineSpec, build
from fastmode.backends.profiles import Catalog
from fastmode.backends.scheduler import Sequence
from fastmode.backends.simulate import LengthDist, Workload, simulate
from fastmode.gateway.config import load_config


class Pool:
    """One deployment on the real-time clock through the handle the gateway itself uses
    (``RealtimeFleet`` -> ``PoolHandle``), as a bare engine: no fleet, no tenants."""

    def __init__(self, dep: DeploymentSpec, on_step: Callable[..., None] | None = None) -> None:
        self.fleet = RealtimeFleet(EngineSpec(Catalog.builtin(), {dep.name: dep}, {}), on_step)
        self.handle: PoolHandle = self.fleet.deployments[dep.name]
        self.submit = self.handle.submit
        self.start = self.fleet.start
        self.stop = self.fleet.stop

    @property
    def replicas(self) -> list[RealtimeReplica]:
        return self.handle.replicas


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return build(load_config().sim())


def random_arrivals(seed: int, spec: EngineSpec, n: int, rate: float) -> list[Arrival]:
    rng = random.Random(seed)
    names = list(spec.deployments)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        out.append(
            Arrival(t, rng.choice(names), rng.randint(1, 6000), rng.randint(1, 400), tag=i)
        )
    return out


def timeline(spec: EngineSpec, arrivals: list[Arrival], steady: bool) -> dict:
    done: dict = {}
    rejected: list = []

    def finish(seq: Sequence) -> None:
        assert seq.tag not in done
        done[seq.tag] = (seq.arrival, seq.admitted_at, seq.first_token_at, seq.finished_at)

    d = VirtualDriver(
        spec.deployments,
        on_finish=finish,
        on_reject=lambda a, r: rejected.append((a.tag, r)),
        steady=steady,
    )
    end = d.run(arrivals)
    return {"done": done, "rejected": rejected, "end": end, "steps": d.steps}


def assert_same(a: dict, b: dict) -> None:
    assert a["rejected"] == b["rejected"]
    assert a["done"].keys() == b["done"].keys()
    for k, va in a["done"].items():
        for x, y in zip(va, b["done"][k], strict=True):
            assert abs(x - y) <= 1e-9, (k, va, b["done"][k])
    assert abs(a["end"] - b["end"]) <= 1e-9
    assert a["steps"] == b["steps"]


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([2.0, 20.0, 80.0]))
def test_steady_stretches_give_the_step_by_step_timeline(spec: EngineSpec, seed: int, rate: float):
    arrivals = random_arrivals(seed, spec, 60, rate)
    fast = timeline(spec, arrivals, steady=True)
    slow = timeline(spec, [dataclasses.replace(a) for a in arrivals], steady=False)
    assert fast["done"]
    assert_same(fast, slow)


def test_steady_equivalence_with_overload_and_rejections(spec: EngineSpec):
    small = {
        n: dataclasses.replace(d, limits=dataclasses.replace(d.limits, max_waiting=2))
        for n, d in spec.deployments.items()
    }
    tiny = EngineSpec(spec.catalog, small, spec.tiers)
    arrivals = random_arrivals(7, tiny, 300, 400.0)
    arrivals.append(Arrival(arrivals[-1].time, "spark", 900_000, 10, tag="huge"))
    a = timeline(tiny, arrivals, steady=True)
    b = timeline(tiny, [dataclasses.replace(x) for x in arrivals], steady=False)
    reasons = {r for _, r in a["rejected"]}
    assert reasons == {"overloaded", "too_large"}
    assert_same(a, b)


@pytest.mark.parametrize("concurrency", [3, 40])
def test_closed_loop_is_exact_with_steady_stretches(spec: EngineSpec, concurrency: int):
    """Arrivals pushed from on_finish (closed loop) must not change the timeline either."""
    wl = Workload(
        {"standard": 0.5, "fast": 0.3, "spark": 0.2},
        LengthDist("uniform", 1500),
        LengthDist("lognormal", 200),
        concurrency=concurrency,
        duration=10.0,
        seed=concurrency,
    )
    a = simulate(spec, wl, steady=True)
    b = simulate(spec, wl, steady=False)
    assert a.run["completed"] > concurrency
    assert a.run["steps"] == b.run["steps"]
    assert a.run["simulated_s"] == pytest.approx(b.run["simulated_s"], abs=1e-9)
    for name, ta in a.tiers.items():
        tb = b.tiers[name]
        assert ta["requests"] == tb["requests"] and ta["completed"] == tb["completed"]
        for key in ("ttft_s", "e2e_s"):
            for q in ("p50", "p90", "p99"):
                assert ta[key][q] == pytest.approx(tb[key][q], abs=1e-9)
    assert b.run["steps"] > 10 * a.run["completed"]  # the step-by-step path was really taken


def test_push_during_a_run(spec: EngineSpec):
    """A closed loop by hand: every finish sends the next request of the same user."""
    seen: list[Sequence] = []
    d = VirtualDriver(spec.deployments)

    def finish(seq: Sequence) -> None:
        seen.append(seq)
        if seq.tag < 5:
            d.push(Arrival(seq.finished_at, "fast", 100, 20, tag=seq.tag + 1))

    d.on_finish = finish
    d.run([Arrival(0.0, "fast", 100, 20, tag=0)], feedback=True)
    assert [s.tag for s in seen] == list(range(6))
    for prev, nxt in zip(seen, seen[1:], strict=False):
        assert nxt.arrival == prev.finished_at


def test_arrivals_to_other_deployments_do_not_cut_stretches(spec: EngineSpec):
    """A lone standard request beside a stream of spark ones: same timeline, few calls."""
    arrivals = [Arrival(0.0, "standard", 2000, 500, tag="s")]
    arrivals += [Arrival(0.01 * i, "spark", 100, 5, tag=i) for i in range(1, 400)]
    calls: dict[str, int] = {}

    def on_step(name, *_):
        calls[name] = calls.get(name, 0) + 1

    d = VirtualDriver(spec.deployments, on_step=on_step)
    d.run(arrivals)
    assert calls["standard-0"] <= 3  # one prefill step, then one stretch to the finish
    assert_same(
        timeline(spec, arrivals, steady=True),
        timeline(spec, [dataclasses.replace(a) for a in arrivals], steady=False),
    )


# ---------------------------------------------------------------------------------------------
# real time vs virtual time
# ---------------------------------------------------------------------------------------------


async def test_realtime_driver_matches_virtual_driver(spec: EngineSpec):
    """Three requests at once on the spark deployment (short steps), 30 tokens each."""
    dep = dataclasses.replace(spec.deployments["spark"], replicas=1)
    outputs = [30, 25, 12]
    prompts = [1200, 300, 2500]

    # virtual: the same arrivals at t=0; token k of a sequence ends step first_step + k
    ends: list[float] = []
    clock = [0.0]

    def on_step(_name, dt0, _tokens, _batch, steps, dt1):
        assert steps == 1 and dt0 == dt1
        clock[0] += dt0
        ends.append(clock[0])

    virtual: dict[int, Sequence] = {}
    d = VirtualDriver(
        {dep.name: dep},
        on_step=on_step,
        on_finish=lambda s: virtual.__setitem__(s.tag, s),
        steady=False,
    )
    pairs = zip(prompts, outputs, strict=True)
    d.run([Arrival(0.0, dep.name, p, o, tag=i) for i, (p, o) in enumerate(pairs)])
    expected = {
        i: [ends[s.first_step + k] for k in range(s.output_tokens)] for i, s in virtual.items()
    }

    # real time: submit all three at once, collect the modeled timestamps
    starts: list[float] = []
    rt = Pool(dep, on_step=lambda _r, res: starts.append(res.start))
    # a step the host served late slips the timeline by its lateness (a loaded test machine):
    # the real-time timeline is the virtual one shifted by the slips before each step
    slips: dict[int, float] = {}
    rt.fleet.driver.on_lag = lambda r, s: slips.__setitem__(r.scheduler.step_index, s)

    def shift(step: int) -> float:
        return sum(s for i, s in slips.items() if i <= step)

    streams = [rt.submit(p, o) for p, o in zip(prompts, outputs, strict=True)]
    first_arrival = streams[0].seq.arrival
    rt.start()

    async def collect(stream) -> list[tuple[int, float]]:
        """(tokens so far, modeled time of the last of them) per item."""
        out: list[tuple[int, float]] = []
        async for _ in stream:
            out.append((stream.delivered, stream.last_at))
        return out

    try:
        got = await asyncio.wait_for(asyncio.gather(*(collect(s) for s in streams)), 10)
    finally:
        await rt.stop()

    # The replica starts its first step when its task wakes, a few microseconds of wall time
    # after the submits; the virtual driver starts it at the arrival. Measured from the first
    # step's start the two timelines agree exactly; from the first arrival, within that delay.
    origin = starts[0]
    assert 0 <= origin - first_arrival < 0.05
    for i, items in enumerate(got):
        assert items[-1][0] == outputs[i]
        assert [t for _, t in items] == sorted(t for _, t in items)
        for count, t in items:  # each item's last token at its step's modeled end
            step = streams[i].seq.first_step + count - 1
            e = expected[i][count - 1] + shift(step)
            assert t - origin == pytest.approx(e, abs=1e-6)
            assert abs((t - first_arrival) - e) <= (origin - first_arrival) + 1e-6
    for i, s in enumerate(streams):
        seq = s.seq
        assert seq.first_token_at - origin == pytest.approx(
            virtual[i].first_token_at + shift(seq.first_step), abs=1e-6)
        assert seq.finished_at - origin == pytest.approx(
            virtual[i].finished_at + shift(seq.first_step + seq.output_tokens - 1), abs=1e-6)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let the event loop run until ``condition()`` holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0)


async def test_realtime_cancel_frees_the_slot(spec: EngineSpec):
    dep = dataclasses.replace(spec.deployments["spark"], replicas=1)
    rt = Pool(dep)
    rt.start()
    try:
        stream = rt.submit(100, 10_000)
        async for _ in stream:
            break
        await stream.aclose()
        sched = rt.replicas[0].scheduler
        assert sched.running == 0  # no load from the cancel on ...
        await until(lambda: stream.seq.state == "cancelled")  # ... dropped at the next plan
        assert sched.kv_used_tokens == dep.background.kv_tokens
    finally:
        await rt.stop()


async def test_cancel_wakes_a_waiting_reader(spec: EngineSpec):
    """A reader blocked on the next token ends when the stream is cancelled, never hangs."""
    dep = dataclasses.replace(spec.deployments["standard"], replicas=1)
    rt = Pool(dep)
    rt.start()
    try:
        stream = rt.submit(100, 10_000)
        got: list[int] = []

        async def read() -> None:
            async for n in stream:
                got.append(n)

        reader = asyncio.ensure_future(read())
        await until(lambda: bool(got))
        stream.cancel()
        await asyncio.wait_for(reader, 1.0)
        assert reader.done() and sum(got) < 10_000
    finally:
        await rt.stop()


async def test_a_request_that_left_the_engine_is_unlinked(spec: EngineSpec):
    """Finished (after its last step was reported) or cancelled, a request's sequence drops
    its tag (the stream) and the stream the caller's: no reference cycle is left for the
    cyclic collector (TokenStream.unlink). The engine-side metrics still read the caller's tag
    in the step that finished it (``on_step`` runs before the unlinking)."""
    dep = dataclasses.replace(spec.deployments["spark"], replicas=1)
    seen: list[object] = []

    def on_step(replica: RealtimeReplica, result) -> None:
        seen.extend(seq.tag.tag for seq in result.finished)

    rt = Pool(dep, on_step)
    rt.start()
    try:
        done = rt.submit(100, 20)
        done.tag = caller = object()
        assert sum([n async for n in done]) == 20
        await until(lambda: done.seq.tag is None)
        assert done.tag is None and seen == [caller]
        left = rt.submit(100, 10_000)
        left.tag = object()
        async for _ in left:
            break
        assert left.seq.tag is left  # still in the engine
        await left.aclose()  # the reader leaves: the request is cancelled
        assert left.seq.tag is None and left.tag is None
    finally:
        await rt.stop()
