"""Late 2026's facts against physics.

OpenAI's ultrafast: up to 6x the speed of standard, at 6x its price, the same model. The fast
modes of the current models: up to 2.5x the speed at 2x the price. Each candidate deployment is
predicted from the same roofline as the February ones and its ratios to ``standard`` are held
against those facts; the assertions are the verdicts of docs/fast-hypotheses.md, so a change in
the physics that flips one fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.predict import predict_tier
from fastmode.backends.speculative import SpeculativePlacement, tokens_per_cycle
from fastmode.gateway.config import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fast-hypotheses.toml"
TIERS = ("standard", "fast-lowbatch", "ultra-wafer", "ultra-nvl72", "ultra-speculative",
         "ultra-nvl72-spec", "fast2-nvl72", "fast2-speculative", "fast2-at-a-loss")


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return build(load_config(EXAMPLE).sim())


@pytest.fixture(scope="module")
def predicted(spec: EngineSpec) -> dict[str, dict[str, Any]]:
    return {t: predict_tier(spec, t) for t in TIERS}


def vs_standard(predicted: dict[str, dict[str, Any]], tier: str) -> dict[str, float]:
    a, b = predicted[tier], predicted["standard"]
    return {
        "speed": a["output_tokens_per_s_per_user"] / b["output_tokens_per_s_per_user"],
        "price": (a["prices_usd_per_million_tokens"]["output"]
                  / b["prices_usd_per_million_tokens"]["output"]),
        "cost": a["hardware_cost_factor"],
        "ttft": a["ttft_s"] / b["ttft_s"],
    }


# -- ultrafast: ~6x the speed at ~6x the price -------------------------------------------------

def test_the_whole_model_in_wafer_sram_is_fast_enough_but_far_too_dear(spec, predicted) -> None:
    r = vs_standard(predicted, "ultra-wafer")
    assert r["speed"] > 6  # the per-layer floor of 64 layers: ~10x
    assert r["price"] > 4 * 6  # 12 wafers at a batch the SRAM's KV room allows
    p = spec.deployments["ultra-wafer"].placement
    # the batch is bounded by the SRAM left for KV: a few dozen agent contexts at most
    assert p.kv_capacity_tokens < 40 * 24_000
    assert predicted["ultra-wafer"]["model"] == predicted["standard"]["model"]


def test_a_whole_nvl72_rack_at_a_tiny_batch_cannot_reach_six_times(spec, predicted) -> None:
    r = vs_standard(predicted, "ultra-nvl72")
    assert r["speed"] < 6 and r["price"] > 4 * 6
    # why: the step's fixed costs (two all-reduces per layer, the host's work, the layer floor)
    # and the KV read (8 KV heads over 72 GPUs: each head stored and read by 9 of them, so the
    # read takes as long as at tensor parallel 8) do not shrink with more GPUs and alone exceed
    # a sixth of standard's step
    b = predicted["ultra-nvl72"]["step_breakdown_s"]
    fixed = b["comm_s"] + b["overhead_s"] + b["layer_floor_s"] + b["kv_s"]
    assert fixed > predicted["standard"]["itl_s"] / 6
    assert spec.deployments["ultra-nvl72"].placement.kv_replication == 9


def test_speculation_on_an_nvl72_rack_at_a_batch_of_49_misses_six_for_six(predicted) -> None:
    """49 agent contexts of 24K tokens: with 8 KV heads over 72 GPUs every head is stored on 9
    of them, so each GPU reads an eighth of the whole KV per verify step, as on one node; the
    rack's bandwidth does not make it cheap (below 6x at more than 6x the price)."""
    r = vs_standard(predicted, "ultra-nvl72-spec")
    assert r["speed"] < 6 and r["price"] > 6
    b = predicted["ultra-nvl72-spec"]["step_breakdown_s"]
    assert b["kv_s"] > b["weights_s"]


@pytest.mark.parametrize("tier", ["ultra-speculative"])
def test_speculative_decoding_on_a_small_batch_fits_six_for_six(spec, predicted, tier) -> None:
    r = vs_standard(predicted, tier)
    assert 5.0 < r["speed"] < 8.0
    assert 4.5 < r["price"] < 8.0  # derived from hardware cost: about as much as sold
    p = spec.deployments[tier].placement
    assert isinstance(p, SpeculativePlacement)
    assert p.tokens_per_cycle == pytest.approx(tokens_per_cycle(4, 0.85))
    assert predicted[tier]["model"] == predicted["standard"]["model"]  # lossless, same model


def test_the_default_ultrafast_tier_is_the_speculative_candidate(spec, predicted) -> None:
    default = build(load_config().sim())
    ours, theirs = default.deployments["ultrafast"], spec.deployments["ultra-speculative"]
    assert ours.placement == theirs.placement and ours.limits == theirs.limits
    assert predict_tier(default, "ultrafast")["output_tokens_per_s_per_user"] == pytest.approx(
        predicted["ultra-speculative"]["output_tokens_per_s_per_user"], rel=1e-6)


# -- the 2x era: ~2.5x the speed at 2x the price ------------------------------------------------

def test_the_low_batch_pool_alone_costs_six_times_not_two(predicted) -> None:
    r = vs_standard(predicted, "fast-lowbatch")
    assert 2.2 < r["speed"] < 2.8 and r["cost"] > 5


def test_newer_hardware_with_a_larger_domain_fits_the_speed_not_the_price(predicted) -> None:
    r = vs_standard(predicted, "fast2-nvl72")
    assert r["speed"] > 2.2  # with attention data parallelism (each GPU its sequences' KV)
    assert r["price"] > 3.5  # a rack of 72 GPUs costs more per token, not 2x
    assert r["ttft"] > 1.0  # and a prompt's attention runs on one rank: no faster first token


def test_speculation_plus_a_moderate_batch_fits_two_and_a_half_for_two(predicted) -> None:
    r = vs_standard(predicted, "fast2-speculative")
    assert 2.1 < r["speed"] < 2.8
    assert 1.6 < r["price"] < 2.6


def test_the_low_batch_pool_sold_at_two_times_is_a_thinner_margin(predicted) -> None:
    """Priced at 2x what costs 6.2x: the price is the provider's decision (price_factor); the
    markup over the hardware's rent falls by the ratio of the two."""
    r = vs_standard(predicted, "fast2-at-a-loss")
    assert r["price"] == pytest.approx(2.0)
    assert r["cost"] == pytest.approx(vs_standard(predicted, "fast-lowbatch")["cost"])

    def markup(tier: str) -> float:
        o = predicted[tier]
        return (o["prices_usd_per_million_tokens"]["output"]
                / o["hardware_usd_per_million_output_tokens"])

    assert markup("fast2-at-a-loss") == pytest.approx(markup("standard") * 2 / r["cost"])
    assert markup("fast2-at-a-loss") > 1  # still above the hardware's rent at these prices
