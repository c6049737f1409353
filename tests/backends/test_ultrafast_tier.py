"""The default config's ultrafast tier: the same frontier model ~6x faster than
standard, its speed and price derived from the physics, never typed in.

Every figure is recomputed from the roofline (``Placement.step``, ``speculative``) and the
pricing functions (``backends.pricing``), and the published facts it is held against are the
default config's own data (the ``gpt-6-astra`` alias: ``speedup`` and ``price_factor``).
"""

from __future__ import annotations

import pytest

from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.perf import Placement
from fastmode.backends.predict import predict_tier
from fastmode.backends.pricing import hardware_cost_per_token, operating_step_seconds
from fastmode.backends.speculative import SpeculativePlacement, tokens_per_cycle
from fastmode.gateway.config import load_config

ALIAS = "gpt-6-astra"  # the model OpenAI launched ultrafast on, as data in the default config


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return build(load_config().sim())


def test_ultrafast_is_the_same_model_on_the_same_node_with_a_draft(spec: EngineSpec) -> None:
    ultra, std = spec.tiers["ultrafast"], spec.tiers["standard"]
    up, sp = ultra.deployment.placement, std.deployment.placement
    assert isinstance(up, SpeculativePlacement) and not isinstance(sp, SpeculativePlacement)
    assert (up.model, up.hardware, up.chips, up.precision) == (sp.model, sp.hardware, sp.chips,
                                                              sp.precision)
    assert ultra.quality == std.quality  # speculative decoding is lossless
    assert ultra.deployment.limits.max_batch * 10 <= std.deployment.limits.max_batch


def test_its_step_is_the_verify_cycle_over_the_tokens_it_yields(spec: EngineSpec) -> None:
    """The roofline of one cycle: the target's step with k drafted tokens per sequence riding
    along, plus k draft steps, over E = (1 - a^(k+1)) / (1 - a) tokens."""
    dep = spec.deployments["ultrafast"]
    p, bg = dep.placement, dep.background
    assert isinstance(p, SpeculativePlacement) and p.draft is not None
    batch, k = bg.seqs + 1, p.draft_tokens
    ctx = batch * bg.context_tokens
    pre = round(bg.prefill_tokens_per_step * p.tokens_per_cycle)
    pre_ctx = bg.prefill_context * p.tokens_per_cycle
    verify = Placement.step(p, batch, ctx, pre + batch * k, pre_ctx + k * ctx).total_s
    one = p.draft.step(batch, ctx, pre, pre_ctx)
    rest = p.draft.step(batch, ctx)
    drafting = sum(s.total_s - s.breakdown["overhead_s"] for s in (one, *[rest] * (k - 1)))
    e = tokens_per_cycle(k, p.acceptance)
    assert operating_step_seconds(p, bg) == pytest.approx((verify + drafting) / e)


def test_ultrafast_is_about_six_times_standard_as_published(spec: EngineSpec) -> None:
    published = load_config().routes[ALIAS].speedup["ultrafast"]
    ultra, std = predict_tier(spec, "ultrafast"), predict_tier(spec, "standard")
    ratio = ultra["output_tokens_per_s_per_user"] / std["output_tokens_per_s_per_user"]
    assert ratio == pytest.approx(published, rel=0.15)
    # and the speed is the operating step's: one more user beside the tenants
    dep = spec.deployments["ultrafast"]
    step = operating_step_seconds(dep.placement, dep.background)
    assert ultra["output_tokens_per_s_per_user"] == pytest.approx(1 / step, rel=0.05)
    # the first token is not what it sells: prompts are not speculated
    assert ultra["ttft_s"] >= 0.9 * std["ttft_s"]


def test_its_price_is_derived_from_hardware_seconds(spec: EngineSpec) -> None:
    ultra, std = spec.tiers["ultrafast"], spec.tiers["standard"]
    cost = hardware_cost_per_token(ultra.deployment.placement, ultra.deployment.background)
    ref = hardware_cost_per_token(std.deployment.placement, std.deployment.background)
    assert ultra.derived_price_factor == pytest.approx(cost / ref)
    assert ultra.prices.output == pytest.approx(std.prices.output * cost / ref)
    assert ultra.prices.cached_input == pytest.approx(std.prices.cached_input * cost / ref)
    # 6x the price for ~6x the speed: what the hardware costs is about what OpenAI charges
    published = load_config().routes[ALIAS].price_factor["ultrafast"]
    assert cost / ref == pytest.approx(published, rel=0.25)
    assert predict_tier(spec, "ultrafast")["price_factor"] == pytest.approx(cost / ref)
