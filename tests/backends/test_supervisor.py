"""Replica supervision on the real-time clock (``backends.drivers.supervisor``).

A replica is one asyncio task that nothing awaits while the server runs: before supervision,
an exception escaping a step ended it silently and its requests waited forever. Each failure
below is injected on purpose; what must hold: it is logged with its traceback and reported;
the requests without a token yet fail over to another replica and finish; those mid-reply end
(their readers do not hang); the replica restarts, or, failing again soon, stays out of
routing for a backoff. The liveness check is driven by hand (``check(now)``), never by waiting.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from fastmode.backends.drivers import RealtimeDriver, ReplicaFailure, TokenStream, new_sequence
from fastmode.backends.engine import DeploymentSpec, build
from fastmode.gateway.config import load_config


@pytest.fixture(scope="module")
def spark() -> DeploymentSpec:
    """Two spark replicas (short steps) with two seats each for our requests."""
    dep = build(load_config().sim()).deployments["spark"]
    limits = dataclasses.replace(dep.limits, max_batch=dep.background.seqs + 2)
    return dataclasses.replace(dep, replicas=2, limits=limits)


@pytest.fixture
async def driver(spark: DeploymentSpec) -> AsyncIterator[RealtimeDriver]:
    failures: list[ReplicaFailure] = []
    d = RealtimeDriver({spark.name: spark}, on_failure=failures.append)
    d.failures = failures  # type: ignore[attr-defined]
    d.start()
    yield d
    await d.stop()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.001)


async def read(stream: TokenStream) -> int:
    """Every token the stream hands out, bounded: a reader left hanging fails the test."""
    async def drain() -> int:
        async for _ in stream:
            pass
        return stream.delivered
    return await asyncio.wait_for(drain(), 10)


def boom_once(replica) -> None:
    """The replica's next step raises once (after its tokens were handed out)."""
    def boom(rep, result) -> None:
        rep.on_step = None
        raise RuntimeError("injected step failure")
    replica.on_step = boom


async def test_an_exception_in_a_step_is_logged_reported_and_the_replica_restarts(
        driver, caplog) -> None:
    r0, r1 = driver.replicas
    streams = [driver.submit("spark", 50, 400).tag for _ in range(6)]  # 3 per replica
    await until(lambda: r0.scheduler.running == 2 and r1.scheduler.running == 2)
    on_r0 = [s for s in streams if s.replica is r0]
    waiting = [s for s in on_r0 if s.seq.first_step < 0]
    mid_reply = [s for s in on_r0 if s.seq.first_step >= 0]
    assert len(waiting) == 1 and len(mid_reply) == 2
    with caplog.at_level(logging.ERROR):
        boom_once(r0)
        await until(lambda: bool(driver.failures))
    failure = driver.failures[0]
    assert (failure.replica, failure.kind, failure.failed_over) == ("spark-0", "exception", 1)
    assert set(map(id, failure.ended)) == set(map(id, mid_reply))
    record = next(r for r in caplog.records if "replica spark-0 failed" in r.getMessage())
    assert record.exc_info is not None and "injected step failure" in str(record.exc_info[1])
    # the waiting request was served elsewhere, whole; those mid-reply ended, none hangs
    assert waiting[0].replica is r1 and await read(waiting[0]) == 400
    for s in mid_reply:
        assert await read(s) < 400
    # restarted at once: in routing, stepping, serving
    assert r0.alive and r0.healthy
    again = driver.submit("spark", 50, 100).tag
    assert again.replica is r0 and await read(again) == 100


async def test_a_replica_that_fails_again_soon_is_out_of_routing_until_its_backoff_ends(
        driver) -> None:
    r0, r1 = driver.replicas
    sup = driver.supervisor
    sup.max_backoff_s = 0.05  # the backoff's length is not what is tested here
    for n in (1, 2):
        await until(lambda: r0.alive and r0.healthy)  # restarted at once (on a busy host: soon)
        first = driver.submit("spark", 50, 200).tag
        assert first.replica is r0  # the least loaded, first on ties
        boom_once(r0)
        await until(lambda n=n: len(driver.failures) == n)
    assert not r0.healthy and "spark-0" in sup.unhealthy
    assert driver.failures[-1].failures == 2
    picked = [driver.submit("spark", 50, 50).tag for _ in range(3)]
    assert all(s.replica is r1 for s in picked)  # out of routing
    await until(lambda: r0.healthy and r0.alive)  # restarted after its backoff
    assert "spark-0" not in sup.unhealthy
    assert [await read(s) for s in picked] == [50, 50, 50]


async def test_a_replica_with_work_that_stops_stepping_is_found_and_restarted(
        driver, caplog) -> None:
    """A lost wake-up: work lands on an idle replica whose loop is never woken. Its task is
    alive, so only the liveness check can see it: work, no step, long past the modeled end
    of its step. Its request fails over and finishes."""
    r0, r1 = driver.replicas
    sup = driver.supervisor
    await sup.stop()  # the checks below are made by hand
    seq = new_sequence(50, 120, driver.now)
    assert r0.offer(seq) is None
    seq.tag = stream = TokenStream(seq, r0)  # ... and no ``r0.wake()``
    now = driver.now
    assert sup.check(now) == []  # one look is never a stall
    with caplog.at_level(logging.ERROR):
        found = []
        for k in range(sup.strikes):
            found = sup.check(now + sup.stall_after_s + k)
    assert found == [r0]
    failure = driver.failures[0]
    assert (failure.kind, failure.failed_over) == ("stalled", 1)
    assert any("replica spark-0 failed (stalled)" in r.getMessage() for r in caplog.records)
    assert stream.replica is r1 and await read(stream) == 120
    assert r0.alive and not r0.scheduler.has_work


async def test_a_busy_replica_that_steps_is_never_found_stalled(driver) -> None:
    r0, _ = driver.replicas
    stream = driver.submit("spark", 50, 300).tag
    sup = driver.supervisor
    await until(lambda: r0.steps > 0)
    for _ in range(sup.strikes + 1):
        steps = r0.steps
        await until(lambda steps=steps: r0.steps > steps)
        assert sup.check(driver.now + 100) == []
    assert await read(stream) == 300 and not driver.failures


async def test_a_listener_that_raises_on_its_last_call_does_not_stop_the_replica(
        driver, caplog) -> None:
    """The push-mode contract says a listener must not raise; one that does on its last call
    (count 0) used to raise out of the replica's step and end its task for good."""
    r0, _ = driver.replicas
    stream = driver.submit("spark", 50, 40).tag
    await until(lambda: stream.take() > 0)

    def listener(start: int, count: int) -> bool:
        if count == 0:
            raise RuntimeError("listener bug")
        return True

    assert stream.listen(listener)
    with caplog.at_level(logging.ERROR):
        await until(lambda: stream.over)
        await asyncio.sleep(0.01)
    assert any("stream listener failed" in r.getMessage() for r in caplog.records)
    assert r0.alive and not driver.failures
    assert await read(driver.submit("spark", 50, 30).tag) == 30


async def test_waiting_work_that_does_not_fit_yet_never_spins_the_loop(spark) -> None:
    """Nothing of ours runs and the head of the queue does not fit beside the other tenants'
    KV (it grew after the request was queued): the step plans nothing. The loop must wait
    for a change, not plan again at once forever (that froze the whole event loop)."""
    d = RealtimeDriver({spark.name: dataclasses.replace(spark, replicas=1)})
    (r0,) = d.replicas
    sched = r0.scheduler
    stream = d.submit("spark", 50, 20).tag
    bg = sched.background
    room = sched.kv_capacity - bg.kv_tokens
    grown = dataclasses.replace(bg, context_tokens=bg.context_tokens + room // max(1, bg.seqs))
    sched.set_background(grown)  # the queued request no longer fits
    planned = [0]
    step = sched.step

    def counted(now: float):
        planned[0] += 1
        if planned[0] > 10_000:  # a spin: end it (the test then fails below)
            raise RuntimeError("spinning")
        return step(now)

    sched.step = counted  # type: ignore[method-assign]
    d.start()
    await d.supervisor.stop()  # no liveness check in this test
    try:
        await asyncio.sleep(0.05)
        assert planned[0] < 10 and r0.alive
        sched.set_background(bg)  # the other tenants shrink back: served on the next wake
        r0.wake()
        assert await read(stream) == 20
    finally:
        await d.stop()
