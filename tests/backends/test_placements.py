"""The modelling of prefill efficiency by size, 4-bit precisions, MoE at small batch,
expert parallelism, open-loop arrivals, prefill/decode disaggregation, MTP drafts. Pure
functions of the profiles; no clock."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastmode.backends.moe import (
    busiest_group_experts,
    busiest_group_tokens,
    expected_max,
    expert_rows,
    touched_expert_share,
)
from fastmode.backends.perf import Placement, prefill_attention_context
from fastmode.backends.perf_modes import disaggregated, kv_transfer_seconds, open_loop
from fastmode.backends.perf_serving import serving_steady_state
from fastmode.backends.profiles import Catalog, ProfileError
from fastmode.backends.speculative import mtp_draft, speculative_placement

CAT = Catalog.builtin()


def place(model: str, hw: str, chips: int, precision: str, **kw) -> Placement:
    return Placement(CAT.get_model(model), CAT.get_hardware(hw), chips, precision, **kw)


# -- MoE arithmetic ----------------------------------------------------------------------------


@given(st.floats(0.1, 1000), st.floats(0, 1000), st.integers(1, 64))
def test_expected_max_is_between_the_mean_and_everything(mean: float, var: float, n: int):
    top = expected_max(mean, var, n)
    assert mean <= top <= mean * n + 1e-9
    if n == 1 or var == 0:
        assert top == pytest.approx(mean)


def test_the_busiest_expert_group_holds_more_than_its_share_at_small_batches():
    # DeepSeek-V3: 256 experts top-8 over 8 groups; one token touches 8 experts
    mean = 256 / 8 * touched_expert_share(256, 8, 1)
    assert busiest_group_experts(256, 8, 1, 8) > 2 * mean
    # hundreds of tokens touch every expert: every group is full, no imbalance left
    assert busiest_group_experts(256, 8, 1000, 8) == pytest.approx(32, rel=0.01)
    # token assignments stay imbalanced, less so with more tokens
    small = busiest_group_tokens(8, 4, 8) / (4 * 8 / 8)
    big = busiest_group_tokens(8, 4096, 8) / (4096 * 8 / 8)
    assert small > big > 1


def test_every_touched_expert_pays_a_tile():
    rows, per_expert = expert_rows(256, 8, 64, tile=32)
    touched = 256 * touched_expert_share(256, 8, 64)
    assert per_expert == 32  # ~2 tokens each, a tile of 32 rows paid
    assert rows == pytest.approx(touched * 32)
    rows, per_expert = expert_rows(256, 8, 65536, tile=32)
    assert rows == pytest.approx(65536 * 8)  # thousands per expert: no padding left
    assert expert_rows(0, 0, 10, 32) == (0.0, 0.0)


def test_expert_parallelism_costs_imbalance_at_small_batch():
    tp = place("deepseek-v3", "h200", 8, "fp8", kv_precision="bf16")
    ep = place("deepseek-v3", "h200", 8, "fp8", kv_precision="bf16", expert_parallel=8)
    assert ep.step(4, 4 * 2000).breakdown["weights_s"] > tp.step(4, 4 * 2000).breakdown[
        "weights_s"]
    with pytest.raises(ProfileError, match="expert_parallel"):
        place("deepseek-v3", "h200", 8, "fp8", expert_parallel=3)


def test_moe_and_mla_layers_raise_the_latency_floor():
    base = place("deepseek-v3", "h200", 8, "fp8")
    hw = dataclasses.replace(base.hardware, layer_latency_us=5.0, moe_layer_latency_us=20.0,
                             mla_layer_latency_us=30.0)
    p = Placement(base.model, hw, 8, "fp8")
    assert p.step(1, 1000).breakdown["layer_floor_s"] == pytest.approx(61 * 55e-6)
    dense = place("llama-3.1-70b", "h200", 8, "fp8")
    dense = Placement(dense.model, hw, 8, "fp8")
    assert dense.step(1, 1000).breakdown["layer_floor_s"] == pytest.approx(80 * 5e-6)


def test_mla_decode_attends_over_its_latent_with_every_head():
    m = CAT.get_model("deepseek-v3")
    per_layer_head = 2 * (512 + 64) + 2 * 512
    assert m.attention_flops_per_context_token(True) == 61 * 128 * per_layer_head
    assert m.attention_flops_per_context_token(False) == 61 * 128 * 2 * (128 + 64 + 128)


# -- precisions --------------------------------------------------------------------------------


def test_four_bit_weights_run_on_the_fp4_rate_where_the_chip_has_one():
    b200, h100 = CAT.get_hardware("b200"), CAT.get_hardware("h100-sxm")
    assert b200.rate_precision("fp4") == "fp4" and b200.rate_precision("nvfp4") == "fp4"
    assert h100.rate_precision("fp4") == "bf16"  # W4A16 dequantising kernels
    # MXFP4 (gpt-oss) runs W4A8 on Blackwell, W4A16 on Hopper
    assert b200.rate_precision("mxfp4") == "fp8" and h100.rate_precision("mxfp4") == "bf16"
    m = CAT.get_model("llama-3.1-70b")
    assert m.weight_bytes("fp4") < 0.6 * m.weight_bytes("fp8")


def test_fp4_prefill_is_faster_than_fp8_on_blackwell_only():
    ctx = prefill_attention_context(8192, 0)
    for hw, faster in (("b200", True), ("h100-sxm", False)):
        f4 = place("llama-3.1-70b", hw, 2, "fp4").step(0, 0, 8192, ctx).breakdown["compute_s"]
        f8 = place("llama-3.1-70b", hw, 2, "fp8").step(0, 0, 8192, ctx).breakdown["compute_s"]
        assert (f4 < f8) is faster


# -- prefill efficiency by size --------------------------------------------------------------


def test_long_prefills_reach_more_of_the_peak_than_short_ones():
    base = place("llama-3.1-70b", "h100-sxm", 4, "bf16")
    hw = dataclasses.replace(base.hardware, gemm_half_tokens=256.0, attention_half_tokens=2048.0,
                             gemm_min_tokens=0.0)
    p = Placement(base.model, hw, 4, "bf16")
    short = p.gemm_seconds(256) / 256
    long = p.gemm_seconds(16384) / 16384
    # per row: (T + h) / T of the large-GEMM cost, twice it at T = h
    assert short == pytest.approx(long * 2 * 16384 / (16384 + 256), rel=1e-6)
    # attention of a long chunk runs at a higher efficiency than a short one
    s8k = p.step(0, 0, 8192, prefill_attention_context(8192, 0)).breakdown["attention_s"]
    s1k = p.step(0, 0, 1024, prefill_attention_context(1024, 0)).breakdown["attention_s"]
    flops_ratio = prefill_attention_context(8192, 0) / prefill_attention_context(1024, 0)
    assert s8k / s1k < flops_ratio


# -- open loop and disaggregation --------------------------------------------------------------


def test_open_loop_obeys_littles_law_and_refuses_a_rate_it_cannot_serve():
    p = place("llama-3.1-8b", "h100-sxm", 1, "bf16")
    w = open_loop(p, 2.0, 1000, 200)
    assert w.output_tokens_per_s == pytest.approx(2.0 * 200)
    # the batch is the requests in the replica: rate x latency, rounded up to whole sequences
    assert w.running - 1 < 2.0 * w.e2e_s <= w.running
    slow = open_loop(p, 8.0, 1000, 200)
    assert slow.running > w.running and slow.itl_s > w.itl_s
    with pytest.raises(ProfileError, match="rate.*serves"):
        open_loop(p, 10_000.0, 1000, 200)


def test_disaggregation_keeps_prompts_out_of_the_decode_steps():
    dec = place("llama-3.1-70b", "h100-sxm", 4, "fp8")
    pre = place("llama-3.1-70b", "h100-sxm", 4, "fp8")
    d = disaggregated(dec, pre, 4000, 500, concurrency=32)
    w = d.workload
    ctx = 4000 + 250
    assert w.itl_s == pytest.approx(dec.step_seconds(32, 32 * ctx))  # a pure decode step
    assert d.prefill_s == pytest.approx(pre.prefill_seconds(4000, 8192))
    assert w.ttft_s >= d.prefill_s
    colocated = serving_steady_state(dec, 32, 4000, 500, arrivals="spread")
    assert w.itl_s < colocated.itl_s  # no prompt rides along a decode step
    # KV over NVLink inside the node, over the network beyond it
    near = kv_transfer_seconds(dec, 4, 4000)
    far = kv_transfer_seconds(dec, 8, 4000)
    assert far > near > 0


# -- speculative decoding ----------------------------------------------------------------------


def test_mtp_draft_is_one_layer_of_the_model():
    m = CAT.get_model("deepseek-v3")
    d = mtp_draft(m)
    assert d.layers == 1 and d.experts == m.experts
    assert d.total_params_b == pytest.approx(
        (m.total_params_b - m.embedding_params_b) / 61 + m.embedding_params_b)
    p = place("deepseek-v3", "b200", 8, "fp8")
    sp = speculative_placement(p, d, 8, 3, 0.74)
    e = (1 - 0.74 ** 4) / (1 - 0.74)
    assert sp.tokens_per_cycle == pytest.approx(e)
    assert sp.step_seconds(1, 2000) < p.step_seconds(1, 2000)  # faster per token at batch 1
    assert not math.isnan(sp.step_seconds(64, 64 * 2000))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["mi300x", "mi325x", "mi355x", "gh200", "gb200-nvl72", "gb300-nvl72",
                        "b300"]), st.integers(1, 256))
def test_new_hardware_profiles_step_like_the_others(hw: str, b: int):
    chips = 1 if CAT.get_hardware(hw).memory_gb > 150 else 2
    p = place("llama-3.1-70b", hw, chips, "fp8")
    assert p.step_seconds(b + 1, (b + 1) * 1000) >= p.step_seconds(b, b * 1000)
    assert p.kv_capacity_tokens > 0


def test_a_tensor_parallel_group_beyond_the_scale_up_domain_uses_the_network():
    nvl = place("llama-3.1-405b", "gb200-nvl72", 16, "fp8")
    hgx = place("llama-3.1-405b", "b200", 16, "fp8")
    assert nvl.step(8, 8000).breakdown["comm_s"] < hgx.step(8, 8000).breakdown["comm_s"]


# -- disaggregation as a deployment (the scheduler) --------------------------------------------


def _pd_spec(prefill_chips: int | None):
    from fastmode.backends.config import SimConfig
    from fastmode.backends.engine import build

    d = {"model": "llama-3.1-70b", "hardware": "h100-sxm", "chips": 4, "precision": "fp8",
         "replicas": 1, "max_batch": 64, "max_batched_tokens": 8192, "max_waiting": 10000,
         "prefix_caching": False}
    if prefill_chips:
        d["prefill_chips"] = prefill_chips
    raw = {"deployments": {"d": d}, "tiers": {"standard": {"deployment": "d", "prices": {
        "input": 1.0, "cached_input": 0.1, "output": 2.0}}}}
    return build(SimConfig.model_validate(raw))


def test_a_disaggregated_deployment_keeps_prompts_out_of_decode_steps_and_pays_for_them():
    from fastmode.backends.simulate import Workload as SimWorkload
    from fastmode.backends.simulate import simulate
    from fastmode.workload import LengthDist

    pd, co = _pd_spec(4), _pd_spec(None)
    assert pd.deployments["d"].cost_per_token == pytest.approx(
        2 * co.deployments["d"].cost_per_token)  # twice the chips at the same operating point
    wl = SimWorkload(mix={"standard": 1.0}, prompt=LengthDist("fixed", 4000),
                     output=LengthDist("fixed", 300), concurrency=16, requests=96,
                     duration=1e9, seed=5)
    a = simulate(pd, wl).tiers["standard"]
    b = simulate(co, wl).tiers["standard"]
    assert a["completed"] == b["completed"] == 96
    assert a["itl_s"]["p99"] < b["itl_s"]["p99"]  # no 4,000-token chunk rides along
    dec = pd.deployments["d"].placement
    closed = disaggregated(dec, pd.deployments["d"].prefill, 4000, 300, concurrency=16,
                           max_batch=64)
    assert a["output_tokens_per_s"] == pytest.approx(closed.workload.output_tokens_per_s,
                                                     rel=0.15)


def test_a_deployment_can_draft_with_the_models_mtp_layer():
    from fastmode.backends.config import SimConfig
    from fastmode.backends.engine import build
    from fastmode.backends.speculative import SpeculativePlacement

    d = {"model": "deepseek-v3", "hardware": "h200", "chips": 8, "precision": "fp8",
         "replicas": 1, "max_batch": 8, "speculative": {"draft_model": "mtp", "draft_chips": 8,
                                                         "draft_tokens": 3, "acceptance": 0.74}}
    raw = {"deployments": {"d": d}, "tiers": {"standard": {"deployment": "d", "prices": {
        "input": 1.0, "cached_input": 0.1, "output": 2.0}}}}
    spec = build(SimConfig.model_validate(raw))
    p = spec.deployments["d"].placement
    assert isinstance(p, SpeculativePlacement) and p.draft is not None
    assert p.draft.model.name == "deepseek-v3-mtp"
    plain = place("deepseek-v3", "h200", 8, "fp8")
    assert p.step_seconds(1, 3000) < plain.step_seconds(1, 3000)
