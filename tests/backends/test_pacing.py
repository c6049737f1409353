"""A late real-time replica slips its timeline; it never catches up.

The host's lag is injected deterministically: the event loop is held for ``STALL`` seconds
(``time.sleep`` inside a reader, as an admission burst or a busy host would hold it) while a
stream runs. What must hold, on the modeled timestamps:

- the stall shows once: one slip of about its length, reported to ``on_lag``;
- the model's timeline shifts by the slips and by nothing else: every token's modeled time is
  the virtual driver's (the same scheduler without a host) plus the slips before it, so after
  the stall the gaps are the modeled inter-token latency again;
- no catch-up burst: no token is read more than a few milliseconds after its modeled time, nor
  ever before it.

Host noise on a busy test machine may add small slips of its own; they are reported like the
stall's and accounted the same way, so the assertions do not depend on the machine's load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from test_drivers import Pool

from fastmode.backends.drivers import PACING_TOLERANCE_S, Arrival, VirtualDriver
from fastmode.backends.engine import DeploymentSpec, build
from fastmode.gateway.config import load_config

STALL = 0.3  # seconds the event loop is held
PROMPT, OUTPUT = 300, 400


@pytest.fixture(scope="module")
def spark() -> DeploymentSpec:
    return dataclasses.replace(build(load_config().sim()).deployments["spark"], replicas=1)


def virtual_ends(dep: DeploymentSpec) -> list[float]:
    """End of every step of one request alone, from the first step's start (no host)."""
    ends: list[float] = []
    clock = [0.0]

    def on_step(_name, dt0, _tokens, _batch, steps, dt1):
        assert steps == 1 and dt0 == dt1
        clock[0] += dt0
        ends.append(clock[0])

    VirtualDriver({dep.name: dep}, on_step=on_step, steady=False).run(
        [Arrival(0.0, dep.name, PROMPT, OUTPUT)])
    return ends


async def test_a_held_loop_slips_the_timeline_once_then_tokens_come_at_the_modeled_pace(
        spark: DeploymentSpec) -> None:
    ends = virtual_ends(spark)
    starts: list[float] = []
    slips: dict[int, float] = {}  # step index -> seconds the timeline moved there
    stepped: dict[int, float] = {}  # step index -> the slip its result carries

    def on_step(_r, res) -> None:
        starts.append(res.start)
        stepped[res.index] = res.slip

    pool = Pool(spark, on_step=on_step)
    pool.fleet.driver.on_lag = lambda r, s: slips.__setitem__(r.scheduler.step_index, s)
    stream = pool.submit(PROMPT, OUTPUT)
    loop = asyncio.get_running_loop()
    items: list[tuple[int, int, float, float]] = []  # (tokens, new, modeled time, read at)
    held_after = 0
    pool.start()
    try:
        async for n in stream:
            items.append((stream.delivered, n, stream.last_at, loop.time()))
            if not held_after and stream.delivered >= OUTPUT // 4:
                held_after = stream.delivered
                time.sleep(STALL)  # the whole event loop is held, the replica with it
    finally:
        await pool.stop()

    assert items[-1][0] == OUTPUT
    # the stall shows once: one slip of about its length (the step in flight was due within
    # one modeled step of the stall's start)
    itl = ends[-1] - ends[-2]
    big = [s for s in slips.values() if s > STALL / 2]
    assert len(big) == 1
    assert STALL - 2 * itl - PACING_TOLERANCE_S <= big[0] < STALL + 0.5

    # the model's timeline: the virtual one, shifted by the slips before each token
    origin, first = starts[0], stream.seq.first_step
    for tokens, _new, modeled, _read in items:
        step = first + tokens - 1
        shift = sum(s for i, s in slips.items() if i <= step)
        assert modeled - origin == pytest.approx(ends[step] + shift, abs=1e-6)

    # after the stall, one token per step at the modeled inter-token latency (a gap with a
    # slip of host noise in it is longer by exactly that slip, checked above)
    after = [it for it in items if it[0] > held_after]
    assert all(new == 1 for _, new, _, _ in after)
    for (_t0, _, m0, _), (t1, _, m1, _) in zip(after, after[1:], strict=False):
        step = first + t1 - 1
        if step not in slips:
            assert m1 - m0 == pytest.approx(ends[step] - ends[step - 1], abs=1e-9)

    # no catch-up: every token is read at (never before) its modeled time, a stall later too
    for _tokens, _new, modeled, read in items:
        assert read >= modeled - 1e-4
    assert max(read - modeled for _, _, modeled, read in after) < STALL / 6
    # each step's result says by how much its end slipped (its model duration is the rest)
    assert {i: s for i, s in stepped.items() if s} == slips
    replica = pool.replicas[0]  # the replica's own totals: what the dashboard reads
    assert replica.slips == len(slips) and replica.slipped == pytest.approx(sum(slips.values()))
