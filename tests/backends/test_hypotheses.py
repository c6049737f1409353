"""The competing explanations of fast mode (examples/fast-hypotheses.toml), each from physics.

Every tier of the example is predicted from the same roofline, and its ratios to its baseline
are held against the published facts: Anthropic's fast mode is ~2.5x the speed at 6x the price,
with the first token not faster and the same model; Spark is >1,000 tok/s from a weaker model.
The assertions encode the verdicts of docs/fast-hypotheses.md: a change in the physics that
flips a verdict fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.predict import predict_tier
from fastmode.backends.speculative import SpeculativePlacement, tokens_per_cycle
from fastmode.cli import main
from fastmode.gateway.config import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fast-hypotheses.toml"
TIERS = ("standard", "fast-lowbatch", "fast-speculative", "standard-h100", "fast-newhw", "spark")
# explanation -> (its tier, the tier it is compared with)
PAIRS = {
    "low batch": ("fast-lowbatch", "standard"),
    "speculative decoding": ("fast-speculative", "standard"),
    "newer hardware": ("fast-newhw", "standard-h100"),
    "wafer-scale distil": ("spark", "standard"),
}


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return build(load_config(EXAMPLE).sim())


@pytest.fixture(scope="module")
def predicted(spec: EngineSpec) -> dict[str, dict[str, Any]]:
    return {t: predict_tier(spec, t) for t in TIERS}


def ratios(predicted: dict[str, dict[str, Any]], explanation: str) -> dict[str, float]:
    tier, base = PAIRS[explanation]
    a, b = predicted[tier], predicted[base]
    return {
        "speed": a["output_tokens_per_s_per_user"] / b["output_tokens_per_s_per_user"],
        "price": (a["prices_usd_per_million_tokens"]["output"]
                  / b["prices_usd_per_million_tokens"]["output"]),
        "ttft": a["ttft_s"] / b["ttft_s"],
    }


def test_tokens_per_verify_step_follow_the_acceptance_rate() -> None:
    assert tokens_per_cycle(4, 0.7) == pytest.approx((1 - 0.7**5) / 0.3)
    assert tokens_per_cycle(1, 0.5) == pytest.approx(1.5)
    assert tokens_per_cycle(8, 0.9) > tokens_per_cycle(4, 0.9) > tokens_per_cycle(4, 0.6)
    for bad in ((0, 0.5), (4, 1.0), (4, 0.0)):
        with pytest.raises(ValueError):
            tokens_per_cycle(*bad)


def test_the_low_batch_pool_fits_the_published_facts(predicted) -> None:
    r = ratios(predicted, "low batch")
    assert 2.2 < r["speed"] < 2.8  # ~2.5x the speed
    assert 5.0 < r["price"] < 7.2  # ~6x the price, derived from hardware cost per token
    assert r["ttft"] >= 1.0  # the first token is not faster
    assert predicted["fast-lowbatch"]["model"] == predicted["standard"]["model"]


def test_speculative_decoding_is_faster_but_cheaper_not_six_times_dearer(spec, predicted) -> None:
    r = ratios(predicted, "speculative decoding")
    p = spec.deployments["standard-spec"].placement
    assert isinstance(p, SpeculativePlacement) and p.tokens_per_cycle == pytest.approx(2.773, 1e-3)
    assert 1.05 < r["speed"] < 2.0  # the verify step of 193 x 5 tokens is no longer free
    assert r["price"] < 1.0  # more tokens per node-second: cheaper, not 6x
    assert r["ttft"] == pytest.approx(1.0, abs=0.1)  # prompts are not speculated
    assert predicted["fast-speculative"]["model"] == predicted["standard"]["model"]
    assert spec.tiers["fast-speculative"].quality == spec.tiers["standard"].quality


def test_newer_hardware_fits_the_speed_not_the_price_nor_the_first_token(predicted) -> None:
    r = ratios(predicted, "newer hardware")
    assert 1.8 < r["speed"] < 3.0  # B200's bandwidth over H100's
    assert r["price"] < 1.5  # a B200 hour costs 2x an H100's and does >2x the tokens
    assert r["ttft"] < 0.8  # and its prefill is faster too: the first token would improve


def test_the_wafer_scale_distil_is_over_a_thousand_tokens_a_second_and_weaker(spec, predicted):
    spark = predicted["spark"]
    assert spark["output_tokens_per_s_per_user"] > 1000
    assert spark["model"] != predicted["standard"]["model"]
    assert spec.tiers["spark"].quality.tool_error_rate > 0 == spec.tiers[
        "standard"].quality.tool_error_rate
    assert spark["bound"] == "latency"  # the per-layer floor, not bandwidth


def test_a_speculative_pool_simulates_step_by_step(spec) -> None:
    """No closed form for its stretches: the virtual clock steps it one by one, and each step
    still yields one token per sequence at the amortised cycle time."""
    from fastmode.backends.drivers import Arrival, VirtualDriver

    dep = spec.deployments["standard-spec"]
    done = []
    d = VirtualDriver({dep.name: dep}, on_finish=done.append)
    d.run([Arrival(0.0, dep.name, 2000, 300)])
    (seq,) = done
    assert d.steps == 300  # one scheduler step per token
    itl = (seq.finished_at - seq.first_token_at) / 299
    assert itl == pytest.approx(1 / predict_tier(spec, "fast-speculative", 2000, 300)[
        "output_tokens_per_s_per_user"], rel=0.02)


@pytest.mark.parametrize("tier", TIERS)
def test_predict_works_for_every_explanation(tier: str, capsys) -> None:
    assert main(["predict", "--config", str(EXAMPLE), "--tier", tier, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tier"] == tier and out["output_tokens_per_s_per_user"] > 0
    assert out["prices_usd_per_million_tokens"]["output"] > 0
