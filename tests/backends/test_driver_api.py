"""The clock API both drivers implement: now, submit, cancel; same routing and admission."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from fastmode.backends.drivers import (
    Arrival,
    Driver,
    Overloaded,
    RealtimeDriver,
    TokenStream,
    TooLarge,
    VirtualDriver,
)
from fastmode.backends.engine import DeploymentSpec, EngineSpec, build
from fastmode.backends.scheduler import Sequence
from fastmode.gateway.config import load_config


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return build(load_config().sim())


def small(spec: EngineSpec, name: str, **limits: int) -> dict[str, DeploymentSpec]:
    dep = spec.deployments[name]
    dep = dataclasses.replace(dep, replicas=2, limits=dataclasses.replace(dep.limits, **limits))
    return {name: dep}


def test_both_drivers_build_the_same_replicas(spec: EngineSpec) -> None:
    async def realtime_names() -> list[tuple[str, str]]:
        rt = RealtimeDriver(spec.deployments)
        return [(r.name, r.deployment) for r in rt.replicas]

    virtual = VirtualDriver(spec.deployments)
    assert isinstance(virtual, Driver)
    names = [(r.name, r.deployment) for r in virtual.replicas]
    assert names == asyncio.run(realtime_names())
    assert names[0] == (f"{next(iter(spec.deployments))}-0", next(iter(spec.deployments)))


async def test_admission_is_shared(spec: EngineSpec) -> None:
    """Too large and overloaded are decided once, in the base, for both clocks."""
    background = spec.deployments["spark"].background.seqs
    deps = small(spec, "spark", max_batch=background + 3, max_waiting=0)
    slots = 2 * 3  # free slots over both replicas
    for driver in (VirtualDriver(deps), RealtimeDriver(deps)):
        with pytest.raises(TooLarge):
            driver.submit("spark", 900_000, 10)
        for _ in range(slots):
            driver.submit("spark", 100, 10)
        with pytest.raises(Overloaded):
            driver.submit("spark", 100, 10)
        # routing: least outstanding work first, so both replicas got their share
        assert [r.load for r in driver.replicas] == [slots // 2, slots // 2]


def test_virtual_submit_and_cancel(spec: EngineSpec) -> None:
    finished: list[Sequence] = []
    d = VirtualDriver(small(spec, "fast"), on_finish=finished.append)
    keep = d.submit("fast", 200, 30, tag="keep")
    drop = d.submit("fast", 200, 30, tag="drop")
    late = d.submit("fast", 200, 30, tag="late")
    assert keep.arrival == d.now == 0.0
    d.cancel(drop)
    d.run([Arrival(0.5, "fast", 100, 5, tag="arrival")])
    assert sorted(s.tag for s in finished) == ["arrival", "keep", "late"]
    assert drop.state == "cancelled"
    assert all(r.scheduler.kv_used_tokens == r.scheduler.background.kv_tokens
               for r in d.replicas)
    assert late.finished_at > 0


def test_virtual_cancel_while_running(spec: EngineSpec) -> None:
    """Cancelled from a callback mid-run: the slot is free at the replica's next step."""
    deps = small(spec, "fast")
    d = VirtualDriver(deps, steady=True)
    long = d.submit("fast", 100, 5_000, tag="long")
    done: list[str] = []

    def first_token(seq: Sequence) -> None:
        if seq.tag == "short":
            d.cancel(long)

    d.on_first_token = first_token
    d.on_finish = lambda s: done.append(s.tag)
    d.run([Arrival(0.05, "fast", 100, 5, tag="short")])
    assert done == ["short"] and long.state == "cancelled"
    assert long.tokens_after(long.first_step + 10_000) == 5_000  # never finished, only cut


async def test_realtime_submit_gives_a_token_stream(spec: EngineSpec) -> None:
    rt = RealtimeDriver(small(spec, "spark"))
    seq = rt.submit("spark", 50, 4, tag="mine")
    stream = seq.tag
    assert isinstance(stream, TokenStream) and stream.tag == "mine" and stream.seq is seq
    assert seq.arrival == pytest.approx(rt.now, abs=0.05)
    rt.start()
    try:
        counts = [n async for n in stream]
        assert sum(counts) == 4 and stream.delivered == 4
        assert stream.last_at == pytest.approx(seq.finished_at)
        other = rt.open("spark", 50, 10_000)
        rt.cancel(other.seq)  # cancelling through the driver ends the stream at once
        assert [b async for b in other] == [] and other.seq.state == "cancelled"
    finally:
        await rt.stop()
