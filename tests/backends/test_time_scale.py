"""The real-time driver at a time scale: modeled times unchanged, sleeps scaled.

Run on a virtual-time event loop (``virtual_loop``), the driver's timeline is exact: each
request's modeled times equal the virtual driver's for the same arrivals at every scale, and
the loop's clock, which only moves by the driver's sleeps, advances ``scale`` times the
modeled span."""

from __future__ import annotations

import dataclasses

import pytest
from virtual_loop import VirtualTimeLoop, run_virtual

from fastmode.backends.drivers import Arrival, RealtimeDriver, TokenStream, VirtualDriver
from fastmode.backends.drivers.clock import ScaledClock
from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.scheduler import Sequence
from fastmode.gateway.config import load_config

REQUESTS = [("spark", 1200, 300), ("spark", 300, 120), ("standard", 2500, 200),
            ("standard", 800, 60)]


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return build(load_config().sim())


def deployments(spec: EngineSpec) -> dict:
    return {name: dataclasses.replace(spec.deployments[name], replicas=1)
            for name in ("spark", "standard")}


def virtual_times(spec: EngineSpec) -> list[tuple[float, float, float]]:
    """(admitted, first token, finished) after arrival, per request, on the virtual clock."""
    done: dict[int, Sequence] = {}
    d = VirtualDriver(deployments(spec), on_finish=lambda s: done.__setitem__(s.tag, s),
                      steady=False)
    d.run([Arrival(0.0, dep, p, o, tag=i) for i, (dep, p, o) in enumerate(REQUESTS)])
    return [(s.admitted_at - s.arrival, s.first_token_at - s.arrival,
             s.finished_at - s.arrival) for s in (done[i] for i in range(len(REQUESTS)))]


def realtime_run(spec: EngineSpec, scale: float) -> tuple[list[Sequence], float, int]:
    """The requests on the real-time driver at ``scale``: their sequences, the loop's wall
    seconds from start to the last token, and the slips."""

    async def main(loop: VirtualTimeLoop) -> tuple[list[Sequence], float, int]:
        clock = ScaledClock(loop.time, scale, wall=loop.time)
        d = RealtimeDriver(deployments(spec), clock=clock)
        streams: list[TokenStream] = [d.open(dep, p, o) for dep, p, o in REQUESTS]
        began = loop.time()
        d.start()
        for s in streams:
            async for _ in s:
                pass
        wall = loop.time() - began
        await d.stop()
        return [s.seq for s in streams], wall, sum(r.slips for r in d.replicas)

    return run_virtual(main)


@pytest.mark.parametrize("scale", [1.0, 0.01, 0.001])
def test_modeled_times_do_not_depend_on_the_scale(spec: EngineSpec, scale: float) -> None:
    expected = virtual_times(spec)
    seqs, wall, slips = realtime_run(spec, scale)
    assert slips == 0  # the virtual loop serves every step on time
    for seq, (admitted, first, finished) in zip(seqs, expected, strict=True):
        assert seq.admitted_at - seq.arrival == pytest.approx(admitted, abs=1e-6)
        assert seq.first_token_at - seq.arrival == pytest.approx(first, abs=1e-6)
        assert seq.finished_at - seq.arrival == pytest.approx(finished, abs=1e-6)
    modeled_span = max(s.finished_at for s in seqs) - min(s.arrival for s in seqs)
    assert modeled_span > 1.0  # a span long enough to tell the scales apart
    assert wall == pytest.approx(modeled_span * scale, rel=1e-6)


def test_tier_speed_ratios_are_kept(spec: EngineSpec) -> None:
    """spark's answer takes the same fraction of standard's at every scale."""
    def ratio(seqs: list[Sequence]) -> float:
        def per_token(s: Sequence) -> float:
            return (s.finished_at - s.first_token_at) / (s.output_tokens - 1)
        return per_token(seqs[0]) / per_token(seqs[2])

    at_one, at_fast = realtime_run(spec, 1.0)[0], realtime_run(spec, 0.01)[0]
    assert ratio(at_one) < 1  # spark is the faster tier
    assert ratio(at_fast) == pytest.approx(ratio(at_one), rel=1e-9)


def test_the_clock_converts_both_ways() -> None:
    t = [50.0]
    clock = ScaledClock(lambda: t[0], 0.01, wall=lambda: t[0])
    t[0] += 0.1  # a tenth of a wall second ...
    assert clock.now() == pytest.approx(60.0)  # ... is ten modeled seconds
    assert clock.to_model(50.2) == pytest.approx(70.0)
    assert clock.wall(10.0) == pytest.approx(0.1)
    same = ScaledClock(lambda: t[0])
    assert same.now() == t[0] and same.to_model(3.0) == 3.0 and same.wall(2.0) == 2.0
    with pytest.raises(ValueError, match="positive"):
        ScaledClock(lambda: 0.0, 0.0)
