"""The built-in fast tier gives a lone user what ``fastmode predict`` and the README say.

The fast pool is small (16 seats), so its other tenants' number fluctuates from tick to tick,
and a lone user's speed with it. The default demand is tuned so that the pool the derived prices
describe (``predict``: its tenants' mean load) is the pool a user sees: a lone user's tokens/s,
request after request, stays within 10% of the prediction (p10 to p90), and under the published
"up to 2.5x" the standard tier's speed. Measured in virtual time on the default fleet (the same
timeline the live gateway plays: ``test_drivers.py``), from a few seconds after the start.
"""

from __future__ import annotations

import dataclasses

import pytest

from fastmode.backends.drivers import Arrival, VirtualDriver
from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.predict import predict_tier
from fastmode.gateway.config import load_config

PROMPT, OUTPUT = 20, 300
REQUESTS = 300


def lone_user(spec: EngineSpec, tier: str, start: float) -> list[float]:
    """A user's requests one after the other (0.2 s apart) on ``tier``: tokens/s of each."""
    rates: list[float] = []
    d = VirtualDriver(spec.deployments, fleet=spec.fleet)

    def finished(seq) -> None:
        rates.append((OUTPUT - 1) / (seq.finished_at - seq.first_token_at))
        if seq.tag < REQUESTS:
            d.push(Arrival(seq.finished_at + 0.2, tier_dep, PROMPT, OUTPUT, tag=seq.tag + 1))

    tier_dep = spec.tiers[tier].deployment.name
    d.on_finish = finished
    d.run([Arrival(start, tier_dep, PROMPT, OUTPUT, tag=0)], feedback=True)
    return sorted(rates)


@pytest.mark.parametrize("start", [0.0, 12.0], ids=["at-start", "later"])
def test_a_lone_fast_user_sees_the_predicted_speed_and_at_most_2_5x_standard(start) -> None:
    spec = build(load_config().sim())
    predicted = predict_tier(spec, "fast", PROMPT, OUTPUT)["output_tokens_per_s_per_user"]
    standard = predict_tier(spec, "standard", PROMPT, OUTPUT)["output_tokens_per_s_per_user"]
    rates = lone_user(spec, "fast", start)
    p10, p90 = rates[len(rates) // 10], rates[len(rates) * 9 // 10]
    assert 0.9 * predicted <= p10 and p90 <= 1.1 * predicted
    assert p90 <= 2.5 * standard


def test_a_pool_whose_tenant_replies_are_shorter_than_a_tick_starts_at_its_mean_load() -> None:
    """A warm replica starts as at a tick: the fast pool's short tenant turns are there from
    the first step (they were there with probability reply/tick only: an empty pool, for the
    first tick, three times in four)."""
    seats = []
    for seed in range(8):
        spec = build(load_config().sim())
        assert spec.fleet is not None
        d = VirtualDriver(spec.deployments, fleet=dataclasses.replace(spec.fleet, seed=seed))
        seats += [r.scheduler.background.seqs for r in d.by_deployment["fast"]]
    demand = spec.deployments["fast"].tenants
    assert demand is not None
    mean = demand.background.seqs
    assert min(seats) > 0
    assert sum(seats) / len(seats) == pytest.approx(mean, rel=0.15)
