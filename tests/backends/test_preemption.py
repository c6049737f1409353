"""Preemption when the KV cache runs out, as vLLM does it (fastmode/backends/kv_paging.py).

An engine with little KV memory for its users (``fastmode engine --gpu-memory-utilization``
low enough that six long replies cannot all fit at once): the scheduler takes blocks as the
replies grow and, when none is left, preempts the newest running request, which later
prefills its prompt and the tokens it had made again and carries on. Checked on the virtual
clock: the newest goes first, every request gets exactly its tokens, a preempted stream stalls
and then continues, its token times are the ends of the steps that made them, and the
scheduler never holds more KV than it has."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from virtual_loop import VirtualTimeLoop, run_virtual

from fastmode.backends.drivers import Arrival, RealtimeDriver, TokenStream, VirtualDriver
from fastmode.backends.engine import DeploymentSpec, build
from fastmode.backends.scheduler import DECODE, Scheduler, Sequence, StepResult
from fastmode.cli import build_parser
from fastmode.cli.engine import apply_flags
from fastmode.gateway.config import load_config
from fastmode.gateway.engine_config import engine_config

PROMPT, OUTPUT, REQUESTS = 1500, 1000, 6


def tight_engine(utilization: str = "0.84") -> DeploymentSpec:
    """``fastmode engine --deployment oss -dp 1 --gpu-memory-utilization 0.84``: one rank."""
    args, extra = build_parser().parse_known_args(
        ["engine", "--deployment", "oss", "-dp", "1", "--gpu-memory-utilization", utilization])
    args.ignored = extra
    return build(engine_config(apply_flags(load_config(), args), "oss", 1).sim()).deployments["oss"]


@pytest.fixture(scope="module")
def dep() -> DeploymentSpec:
    d = tight_engine()
    sched = d.new_scheduler()
    room = sched.kv_capacity - d.background.kv_tokens
    # the premise: every prompt fits at once, every whole reply does not
    assert REQUESTS * PROMPT < room < REQUESTS * (PROMPT + OUTPUT)
    return d


def held(s: Scheduler) -> int:
    cache = s.cache.size if s.cache is not None else 0
    return s._kv_used + s.background.kv_tokens + cache


def test_the_newest_request_is_preempted_and_every_one_completes(dep: DeploymentSpec) -> None:
    s = dep.new_scheduler()
    seqs = [Sequence(i, PROMPT, OUTPUT, 0.0) for i in range(REQUESTS)]
    for q in seqs:
        assert s.submit(q)
    now, finished, victims = 0.0, [], []
    for _ in range(100_000):
        running = sorted((q for q in seqs if q.state in ("prefill", DECODE)), key=lambda q: q.rank)
        before = s.preemptions
        r = s.step(now)
        if r is None:
            break
        if s.preemptions > before and not victims:
            victims = [q for q in running if q.state == "waiting"]
            # the first preempted are the newest admitted, the oldest run on
            assert victims == running[len(running) - len(victims):]
            assert s.waiting[0] is victims[-1]  # back at the front of the queue
        assert held(s) <= s.kv_capacity
        finished += r.finished
        now = r.end
    assert s.preemptions > 0 and victims
    assert sorted(q.id for q in finished) == [q.id for q in seqs]
    for q in seqs:
        assert q.tokens_after(s.step_index) == OUTPUT
    # a preempted request made tokens before, paused, then made the rest after its recompute
    for q in (q for q in seqs if q.preemptions):
        assert q.segments is not None and len(q.segments) == q.preemptions + 1
        (start, base, last), (again, resumed_at, _) = q.segments[0], q.segments[1]
        assert base == 0 and again > last + 1 and resumed_at == last - start + 1


def test_the_scheduler_never_holds_more_kv_than_it_has(dep: DeploymentSpec) -> None:
    """A closed loop of requests of mixed lengths for a while: after every step the blocks of
    the running sequences, the cache and the other tenants' KV fit the capacity."""
    s = dep.new_scheduler()
    lengths = [(300 + 911 * i % 2500, 50 + 397 * i % 1400) for i in range(40)]
    pending = [Sequence(100 + i, p, o, 0.0) for i, (p, o) in enumerate(lengths)]
    now, steps = 0.0, 0
    while pending or s.has_work:
        while pending and len(s.waiting) < 4 and s.submit(pending[0]):
            pending.pop(0)
        r = s.step(now)
        assert r is not None
        assert held(s) <= s.kv_capacity
        for q in (*s.prefilling, *s.decoding.values()):
            assert s.blocks_of(q) % s.block == 0 and s.held_of(q) >= 0
        now, steps = r.end, steps + 1
        assert steps < 200_000
    assert s.preemptions > 0 and s._kv_used == 0


def test_steady_stretches_give_the_timeline_of_single_steps(dep: DeploymentSpec) -> None:
    """The virtual clock's stretches end before the step that must preempt: the same
    preemptions and times as stepping one by one."""
    def run(steady: bool) -> list[tuple[float, float, int]]:
        done: dict[int, Sequence] = {}
        d = VirtualDriver({"oss": dep}, on_finish=lambda q: done.__setitem__(q.tag, q),
                          steady=steady)
        d.run([Arrival(0.01 * i, "oss", PROMPT, OUTPUT, tag=i) for i in range(REQUESTS)])
        return [(done[i].first_token_at, done[i].finished_at, done[i].preemptions)
                for i in range(REQUESTS)]

    stepped, stretched = run(False), run(True)
    assert sum(p for _, _, p in stepped) > 0
    for a, b in zip(stepped, stretched, strict=True):
        assert a[2] == b[2]
        assert a[0] == pytest.approx(b[0], rel=1e-9) and a[1] == pytest.approx(b[1], rel=1e-9)


def stream_run(dep: DeploymentSpec) -> tuple[list[TokenStream], list[list[tuple[float, int]]],
                                             dict[int, StepResult]]:
    """The requests as streams on the real-time driver, on virtual time: each reader's items
    (time, count) and every step's result by index."""
    steps: dict[int, StepResult] = {}

    async def main(loop: VirtualTimeLoop) -> Any:
        d = RealtimeDriver({"oss": dataclasses.replace(dep, replicas=1)},
                           on_step=lambda rep, r: steps.__setitem__(r.index, r))
        streams = [d.open("oss", PROMPT, OUTPUT) for _ in range(REQUESTS)]
        items: list[list[tuple[float, int]]] = [[] for _ in streams]

        async def read(i: int) -> None:
            async for n in streams[i]:
                items[i].append((loop.time(), n))

        d.start()
        await asyncio.gather(*(read(i) for i in range(REQUESTS)))
        await d.stop()
        return streams, items

    streams, items = run_virtual(main)
    return streams, items, steps


def test_a_preempted_stream_stalls_then_continues_with_exactly_its_tokens(
        dep: DeploymentSpec) -> None:
    streams, items, steps = stream_run(dep)
    preempted = [s for s in streams if s.seq.preemptions]
    assert preempted, "the engine was meant to run out of KV"
    for stream, got in zip(streams, items, strict=True):
        assert sum(n for _, n in got) == OUTPUT == stream.delivered  # none lost, none twice
        assert all(n == 1 for _, n in got)  # a reader that keeps up: one token per item
        times = [t for t, _ in got]
        assert times == sorted(times)
        seq = stream.seq
        for k, t in enumerate(times):  # each token when the step that made it ended
            assert t == pytest.approx(steps[seq.step_of(k)].end, abs=1e-9)
        assert stream.token_at(0) == seq.first_token_at == pytest.approx(times[0], abs=1e-9)
        assert stream.last_at == seq.finished_at == pytest.approx(times[-1], abs=1e-9)
    for stream in preempted:
        seq, got = stream.seq, items[streams.index(stream)]
        assert seq.segments is not None
        _, _, last = seq.segments[0]
        again, k, _ = seq.segments[1]
        gap = got[k][0] - got[k - 1][0]
        # the stall: no token from its preemption to the end of the step that recomputed its
        # prompt and its first k tokens (that step's prefill is in the gap), then one a step
        assert got[k - 1][0] == pytest.approx(steps[last].end)
        assert got[k][0] == pytest.approx(steps[again].end)
        recompute = steps[again]
        assert gap >= recompute.end - recompute.start
        others = sorted(b[0] - a[0] for a, b in zip(got[1:k], got[2:k], strict=False))
        assert gap > 5 * others[len(others) // 2]  # far longer than its usual gap
        # its latencies include the stall: end-to-end inter-token latency above the median
        itl = (seq.finished_at - seq.first_token_at) / (OUTPUT - 1)
        assert itl > others[len(others) // 2]


def test_a_growing_request_takes_the_blocks_a_waiting_one_only_pinned(
        dep: DeploymentSpec) -> None:
    """The one running request's next block is held only by the cached prefix a waiting
    request found: as in vLLM, where a waiting request holds no block, the running one gets
    it (the waiting one loses its hit) and is not preempted."""
    from fastmode.backends.background import Background
    from fastmode.backends.prefix_cache import PrefixKey

    s = Scheduler(dep.placement, dep.limits, Background())
    s.kv_capacity = 1024
    key = PrefixKey((512,), (7,), (True,), (float("inf"),))
    warm = Sequence(1, 600, 1, 0.0, prefix=key)  # leaves 512 cached tokens
    assert s.submit(warm)
    now = 0.0
    while s.has_work:
        now = s.step(now).end
    assert s.cache is not None and s.cache.size == 512
    a = Sequence(2, 400, 300, now)
    assert s.submit(a)
    now = s.step(now).end
    b = Sequence(3, 1000, 10, now, prefix=key)  # pins the 512, too long to join beside a
    assert s.submit(b)
    assert b.cache_hit == 512 and s.cache.pinned == 512
    while s.has_work:
        r = s.step(now)
        assert r is not None, "the replica planned nothing though requests wait"
        assert held(s) <= s.kv_capacity
        now = r.end
    assert a.preemptions == 0 and s.preemptions == 0
    assert b.cache_hit == 0 and b.admitted_at >= a.finished_at  # it waited, and lost its hit
    assert a.tokens_after(s.step_index) == 300 and b.state == "finished"
