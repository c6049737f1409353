"""The real-time driver's token streams: counts, not lists of times; ``stream_interval`` pacing.

Modeled times only (the replica's step ends on the loop clock, compared with the virtual
driver's timeline for the same arrivals), never wall-clock speed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest
from test_drivers import Pool

from fastmode.backends.drivers import Arrival, RealtimeReplica, VirtualDriver
from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.scheduler import Sequence
from fastmode.gateway.config import load_config


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return build(load_config().sim())


def virtual_timeline(dep, prompts, outputs) -> tuple[list[float], dict[int, Sequence]]:
    """Step ends (from 0) and the finished sequences of the virtual driver, same arrivals."""
    ends: list[float] = []
    clock = [0.0]

    def on_step(_name, dt0, _tokens, _batch, steps, dt1):
        assert steps == 1 and dt0 == dt1
        clock[0] += dt0
        ends.append(clock[0])

    done: dict[int, Sequence] = {}
    d = VirtualDriver({dep.name: dep}, on_step=on_step,
                      on_finish=lambda s: done.__setitem__(s.tag, s), steady=False)
    pairs = zip(prompts, outputs, strict=True)
    d.run([Arrival(0.0, dep.name, p, o, tag=i) for i, (p, o) in enumerate(pairs)])
    return ends, done


async def read_items(stream) -> list[tuple[int, float]]:
    """(tokens handed out so far, modeled time of the last of them) per item."""
    out: list[tuple[int, float]] = []
    async for _ in stream:
        out.append((stream.delivered, stream.last_at))
    return out


async def run_realtime(dep, prompts, outputs, interval: int):
    starts: list[float] = []
    rt = Pool(dep, on_step=lambda _r, res: starts.append(res.start))
    slips: dict[int, float] = {}  # steps the host served late: the timeline slipped there
    rt.fleet.driver.on_lag = lambda r, s: slips.__setitem__(r.scheduler.step_index, s)
    streams = [rt.submit(p, o) for p, o in zip(prompts, outputs, strict=True)]
    for s in streams:
        s.interval = interval
    rt.start()
    try:
        got = await asyncio.wait_for(asyncio.gather(*(read_items(s) for s in streams)), 10)
    finally:
        await rt.stop()
    return starts[0], streams, got, slips


@pytest.mark.parametrize("interval", [1, 3, 8])
async def test_items_are_whole_events_due_on_the_modeled_timeline(spec: EngineSpec, interval):
    """A reader that keeps up gets ``interval`` tokens per item, when the last of them is
    produced, and the remainder at the end: ceil(n / interval) items, each stamped with the
    modeled time of its last token on the virtual driver's timeline."""
    dep = dataclasses.replace(spec.deployments["spark"], replicas=1)
    prompts, outputs = [1200, 300, 2500], [30, 25, 13]
    ends, virtual = virtual_timeline(dep, prompts, outputs)
    origin, streams, got, slips = await run_realtime(dep, prompts, outputs, interval)
    for i, items in enumerate(got):
        n = outputs[i]
        counts = [c for c, _ in items]
        assert counts[-1] == n and streams[i].delivered == n
        # every item ends on an event boundary, or at the end with the remainder
        assert all(c % interval == 0 for c in counts[:-1])
        assert len(items) == math.ceil(n / interval)  # the reader kept up: one item per event
        seq = virtual[i]
        for count, t in items:  # (shifted by the slips of a host that served steps late)
            step = seq.first_step + count - 1
            shift = sum(s for k, s in slips.items() if k <= step)
            assert t - origin == pytest.approx(ends[step] + shift, abs=1e-6)
        assert streams[i].last_at == pytest.approx(streams[i].seq.finished_at)


async def test_a_reader_wakes_once_per_event_not_once_per_step(spec: EngineSpec, monkeypatch):
    """With interval 8 the replica wakes the reader for 1 step in 8: the waits registered are
    the events, not the steps (one timer per step, nothing per stream per step)."""
    dep = dataclasses.replace(spec.deployments["spark"], replicas=1)
    rt = Pool(dep)
    waits: list[int] = []
    real = RealtimeReplica.wait_for

    def counting(self, index, fut):
        waits.append(index)
        real(self, index, fut)

    monkeypatch.setattr(RealtimeReplica, "wait_for", counting)
    stream = rt.submit(200, 64)
    stream.interval = 8
    rt.start()
    try:
        items = await asyncio.wait_for(read_items(stream), 10)
    finally:
        await rt.stop()
    assert [c for c, _ in items] == list(range(8, 65, 8))
    assert sorted(set(waits)) == waits == [stream.seq.first_step + c - 1 for c, _ in items]


async def test_a_late_reader_gets_every_due_event_at_once(spec: EngineSpec):
    """A reader that did not read for a while gets all the events due in one item (a
    multiple of the interval), never a partial event before the end."""
    dep = dataclasses.replace(spec.deployments["spark"], replicas=1)
    rt = Pool(dep)
    replica = rt.replicas[0]
    stream = rt.submit(200, 100)
    stream.interval = 8
    rt.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while replica.done_index - stream.seq.first_step < 29:  # 30 tokens exist
            assert loop.time() < deadline
            await asyncio.sleep(0)
        n = stream.take()
        assert n == 24  # 3 whole events; the 6 tokens of the 4th are not due yet
        assert stream.due_at(0, n) <= stream.last_at
        rest = await asyncio.wait_for(read_items(stream), 10)
        assert rest[-1][0] == 100 and all(c % 8 == 0 for c, _ in rest[:-1])
    finally:
        await rt.stop()


async def test_cancel_ends_a_reader_waiting_for_its_next_event(spec: EngineSpec):
    dep = dataclasses.replace(spec.deployments["standard"], replicas=1)
    rt = Pool(dep)
    rt.start()
    try:
        stream = rt.submit(100, 10_000)
        stream.interval = 64
        got: list[int] = []

        async def read() -> None:
            async for n in stream:
                got.append(n)

        reader = asyncio.ensure_future(read())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not got:
            assert loop.time() < deadline
            await asyncio.sleep(0)
        stream.cancel()  # the reader waits for a step ~64 steps away: it ends now
        await asyncio.wait_for(reader, 1.0)
        assert got == [64] and stream.seq.state in ("decode", "cancelled")
        # the replica drops it when it plans its next step
        sched = rt.replicas[0].scheduler
        while stream.seq.state != "cancelled":
            assert loop.time() < deadline
            await asyncio.sleep(0)
        assert stream.seq.id not in sched.decoding
    finally:
        await rt.stop()


async def test_a_reader_left_waiting_ends_when_the_replica_stops(spec: EngineSpec):
    dep = dataclasses.replace(spec.deployments["standard"], replicas=1)
    rt = Pool(dep)
    rt.start()
    stream = rt.submit(100, 10_000)
    reader = asyncio.ensure_future(read_items(stream))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not stream.delivered:
        assert loop.time() < deadline
        await asyncio.sleep(0)
    await rt.stop()
    items = await asyncio.wait_for(reader, 1.0)
    assert 0 < items[-1][0] < 10_000
