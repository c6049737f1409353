"""Properties of the roofline model (backends/perf.py): the physics must behave like physics."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.perf import Placement, prefill_attention_context, touched_expert_share
from backends.profiles import Catalog, ProfileError

CAT = Catalog.builtin()

# (model, hardware, chips, precision): placements that fit, dense and MoE, GPU and wafer
PLACEMENTS = [
    ("llama-2-7b", "a100-40g", 1, "bf16"),
    ("llama-3.1-8b", "h100-sxm", 1, "bf16"),
    ("llama-3.1-70b", "h100-sxm", 4, "bf16"),
    ("llama-3.1-70b", "h100-sxm", 2, "fp8"),
    ("llama-3.1-405b", "b200", 8, "fp8"),
    ("mixtral-8x7b", "a100-80g", 2, "bf16"),
    ("gpt-oss-120b", "h100-sxm", 2, "fp8"),
    ("deepseek-v3", "h200", 8, "fp8"),
    ("frontier", "b200", 8, "fp8"),
    ("frontier-spark", "wse-3", 4, "fp8"),
    ("llama-3.1-8b", "wse-3", 1, "bf16"),
]
SETTINGS = settings(max_examples=80, deadline=None)


def place(model: str, hw: str, chips: int, precision: str, util: float = 0.9) -> Placement:
    return Placement(CAT.get_model(model), CAT.get_hardware(hw), chips, precision, util)


PLACED = [place(*p) for p in PLACEMENTS]
placements = st.sampled_from(PLACED)
batches = st.integers(min_value=1, max_value=1024)
contexts = st.integers(min_value=0, max_value=128_000)  # per sequence


@SETTINGS
@given(placements, batches, contexts, st.integers(0, 4096))
def test_step_time_never_decreases_with_batch(p: Placement, b: int, ctx: int, prefill: int):
    pctx = prefill_attention_context(prefill, 1000)
    t1 = p.step_seconds(b, b * ctx, prefill, pctx)
    t2 = p.step_seconds(b + 1, (b + 1) * ctx, prefill, pctx)
    assert t2 >= t1 * (1 - 1e-12)


@SETTINGS
@given(placements, batches, contexts, st.integers(1, 100_000))
def test_step_time_never_decreases_with_context(p: Placement, b: int, ctx: int, more: int):
    assert p.step_seconds(b, b * ctx + more) >= p.step_seconds(b, b * ctx) * (1 - 1e-12)


@SETTINGS
@given(placements, st.integers(1, 4096), st.integers(1, 4096), st.integers(0, 50_000))
def test_prefill_time_never_decreases_with_prompt(p: Placement, n: int, more: int, done: int):
    t1 = p.step_seconds(0, 0, n, prefill_attention_context(n, done))
    t2 = p.step_seconds(0, 0, n + more, prefill_attention_context(n + more, done))
    assert t2 >= t1 * (1 - 1e-12)


@SETTINGS
@given(placements, batches, st.integers(0, 32_000))
def test_cost_per_token_never_rises_with_batch(p: Placement, b: int, ctx: int):
    """t/B: the weights (and the fixed costs) are shared by the whole batch."""
    t1 = p.step_seconds(b, b * ctx) / b
    t2 = p.step_seconds(b + 1, (b + 1) * ctx) / (b + 1)
    assert t2 <= t1 * (1 + 1e-12)


@SETTINGS
@given(st.sampled_from([p for p in PLACED if not p.model.is_moe]), batches, st.integers(0, 4000))
def test_memory_bound_sequences_are_nearly_free_compute_bound_ones_are_not(
    p: Placement, b: int, ctx: int
):
    """Below the transition (weights read > FLOPs) an extra sequence costs only its own KV read
    and its share of the all-reduce: the weights are read anyway. Above it, it pays at least
    its own FLOPs."""
    s1, s2 = p.step(b, b * ctx), p.step(b + 1, (b + 1) * ctx)
    marginal = s2.total_s - s1.total_s
    hw = p.hardware
    n = p.chips if hw.sharding == "tensor" else 1

    def weights_bound(s):
        return s.bound != "latency" and s.breakdown["weights_s"] >= s.breakdown["compute_s"]

    if s1.breakdown["compute_s"] > s1.breakdown["weights_s"] and s1.bound != "latency":
        flops = 2 * p.model.active_params_b * 1e9 / (n * hw.peak_flops(p.precision) * hw.mfu)
        assert marginal >= flops * (1 - 1e-9)
    elif weights_bound(s1) and weights_bound(s2):
        own_kv = ctx * p.kv_bytes_per_token / (n * hw.memory_bandwidth_tbs * 1e12 * hw.mbu)
        comm = s2.breakdown["comm_s"] - s1.breakdown["comm_s"]
        hops = s2.breakdown["hops_s"] - s1.breakdown["hops_s"]
        assert marginal <= (own_kv + comm + hops) * (1 + 1e-9) + 1e-15
        assert marginal < s1.total_s / b or b == 1


@pytest.mark.parametrize("chips,precision", [(2, "bf16"), (4, "bf16"), (8, "bf16"), (2, "fp8")])
def test_memory_to_compute_transition_near_flops_over_bandwidth(chips: int, precision: str):
    p = place("llama-3.1-70b", "h100-sxm", chips, precision)
    hw = p.hardware
    bpp = {"bf16": 2.0, "fp8": 1.0}[precision]
    predicted = (
        hw.peak_flops(precision) * hw.mfu / (hw.memory_bandwidth_tbs * 1e12 * hw.mbu) * bpp / 2
    )
    ctx = 500
    crossover = next(
        b
        for b in range(1, 5000)
        if p.step(b, b * ctx).breakdown["compute_s"] > p.step(b, b * ctx).breakdown["weights_s"]
    )
    assert predicted / 2 <= crossover <= predicted * 2
    assert 100 < crossover < 400  # "~300 on H100 in bf16" (the reference), with MFU/MBU
    assert p.step(crossover // 4, crossover // 4 * ctx).bound == "memory"
    assert p.step(crossover * 4, crossover * 4 * ctx).bound == "compute"


def test_kv_per_token_of_llama3_70b_matches_the_reference():
    """The reference: Llama-3-70B in bf16 holds ~0.33 MB of KV per token of context."""
    p = place("llama-3.1-70b", "h100-sxm", 4, "bf16")
    assert p.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    assert p.kv_bytes_per_token / 1e6 == pytest.approx(0.33, rel=0.02)


@pytest.mark.parametrize("model,hw,chips,precision", PLACEMENTS)
@pytest.mark.parametrize("util", [0.5, 0.9, 1.0])
def test_kv_capacity_is_memory_minus_weights_over_kv_per_token(model, hw, chips, precision, util):
    try:
        p = place(model, hw, chips, precision, util)
    except ProfileError:
        return  # does not fit at this utilisation; covered below
    m, h = CAT.get_model(model), CAT.get_hardware(hw)
    bpp = {"bf16": 2.0, "fp8": 1.0}[precision]
    free = chips * h.memory_gb * 1e9 * util - m.total_params_b * 1e9 * bpp
    kv = 2 * m.layers * m.kv_heads * m.head_dim * (m.kv_bytes_per_element or bpp)
    assert p.kv_capacity_tokens == int(free // kv)
    assert p.kv_capacity_tokens >= 0


@pytest.mark.parametrize(
    "model,hw,chips,precision",
    [
        ("llama-3.1-405b", "h100-sxm", 1, "bf16"),
        ("llama-3.1-70b", "h100-sxm", 1, "bf16"),
        ("frontier", "b200", 2, "fp8"),
        ("frontier-spark", "wse-3", 2, "fp8"),  # the SRAM limit that forces a distil
        ("frontier", "wse-3", 8, "fp8"),
        ("deepseek-v3", "a100-80g", 8, "bf16"),
    ],
)
def test_a_model_too_big_for_its_chips_is_refused(model, hw, chips, precision):
    with pytest.raises(ProfileError, match="does not fit"):
        place(model, hw, chips, precision)


def test_bad_placement_sizes_and_names_are_refused():
    m, h = CAT.get_model("llama-3.1-8b"), CAT.get_hardware("h100-sxm")
    with pytest.raises(ProfileError, match="chips"):
        Placement(m, h, 0, "bf16")
    with pytest.raises(ProfileError, match="precision.*allowed"):
        Placement(m, h, 1, "fp4")
    with pytest.raises(ProfileError, match="model: unknown.*allowed"):
        CAT.get_model("gpt-9")
    with pytest.raises(ProfileError, match="hardware: unknown.*allowed"):
        CAT.get_hardware("tpu-v9")
    with pytest.raises(ProfileError):
        Placement(m, h, 1, "bf16").step(-1, 0)


def test_wafer_is_latency_bound_with_one_hop_per_chip_boundary():
    p = place("frontier-spark", "wse-3", 4, "fp8")
    hw, m = p.hardware, p.model
    for b in (1, 8, 32, 64):
        s = p.step(b, b * 4000)
        assert s.bound == "latency"
        per_hop = hw.interconnect_latency_us * 1e-6 + b * m.d_model * 2 / (
            hw.interconnect_gbs * 1e9
        )
        assert s.breakdown["hops_s"] == pytest.approx(3 * per_hop)
        assert s.breakdown["comm_s"] == 0.0
        floor = m.layers * hw.layer_latency_us * 1e-6
        assert s.total_s == pytest.approx(floor + 3 * per_hop + hw.step_overhead_ms * 1e-3)
    # the SRAM roofline alone would be microseconds per token
    assert p.step(1, 4000).breakdown["weights_s"] < 0.05 * p.step(1, 4000).total_s


@pytest.mark.parametrize("chips", [1, 2, 3, 5])
def test_wafer_hops_grow_with_chips(chips: int):
    p = place("llama-3.1-8b", "wse-3", chips, "bf16")
    one = place("llama-3.1-8b", "wse-3", 1, "bf16").step(4, 4000)
    s = p.step(4, 4000)
    hw, m = p.hardware, p.model
    per_hop = hw.interconnect_latency_us * 1e-6 + 4 * m.d_model * 2 / (hw.interconnect_gbs * 1e9)
    assert s.breakdown["hops_s"] == pytest.approx((chips - 1) * per_hop)
    assert s.total_s == pytest.approx(one.total_s + (chips - 1) * per_hop)


def test_tensor_parallel_all_reduce_cost():
    p = place("llama-3.1-70b", "h100-sxm", 4, "bf16")
    hw, m = p.hardware, p.model
    b = 16
    msg = b * m.d_model * 2
    one = 2 * 3 / 4 * msg / (hw.interconnect_gbs * 1e9) + 2 * 3 * hw.interconnect_latency_us * 1e-6
    assert p.step(b, b * 1000).breakdown["comm_s"] == pytest.approx(2 * m.layers * one)
    assert place("llama-3.1-8b", "h100-sxm", 1, "bf16").step(b, 0).breakdown["comm_s"] == 0


@given(st.integers(1, 512), st.integers(1, 16), st.integers(1, 10_000))
def test_touched_expert_share(experts: int, k: int, tokens: int):
    k = min(k, experts)
    share = touched_expert_share(experts, k, tokens)
    assert 0 < share <= 1
    assert touched_expert_share(experts, k, 1) == pytest.approx(k / experts)
    assert touched_expert_share(experts, k, tokens + 1) >= share
    assert share == pytest.approx(1 - (1 - k / experts) ** tokens)


def test_moe_reads_active_params_for_one_token_and_nearly_all_for_many():
    p = place("frontier", "b200", 8, "fp8")
    m = p.model
    assert p.weight_bytes_read(1) / 1e9 == pytest.approx(m.active_params_b, rel=0.01)
    assert p.weight_bytes_read(1000) / 1e9 == pytest.approx(m.total_params_b, rel=0.01)
    dense = place("llama-3.1-70b", "h100-sxm", 4, "bf16")
    assert dense.weight_bytes_read(1) == dense.weight_bytes_read(500) == dense.weight_bytes


@SETTINGS
@given(placements, st.integers(1, 512), st.integers(0, 2_000_000), st.integers(0, 512))
def test_decode_line_matches_step(p: Placement, b: int, ctx: int, prefill: int):
    """The virtual clock's closed form (run_steady) must reproduce ``step`` exactly."""
    pctx = prefill_attention_context(prefill, 777)
    w, c0, c1, k1, floor, fixed = p.decode_line(b, prefill, pctx)
    x = c0 + c1 * ctx
    core = (w if w > x else x) + k1 * ctx
    dt = (core if core > floor else floor) + fixed
    assert dt == pytest.approx(p.step_seconds(b, ctx, prefill, pctx), rel=1e-12, abs=1e-15)


@SETTINGS
@given(placements, st.integers(1, 20_000), st.integers(64, 8192))
def test_chunked_prefill_sums_its_chunks(p: Placement, prompt: int, chunk: int):
    total = p.prefill_seconds(prompt, chunk)
    chunks = math.ceil(prompt / chunk)
    assert total >= chunks * p.step_seconds(0, 0, 1, 0) * (1 - 1e-12)
    whole = p.prefill_seconds(prompt, prompt)
    assert whole == pytest.approx(p.step_seconds(0, 0, prompt, prompt * prompt / 2))
    # one big chunk is never slower than many small ones (fixed costs paid once)
    assert whole <= total * (1 + 1e-12)


def test_prefill_needs_a_prompt():
    with pytest.raises(ProfileError, match="prompt_tokens"):
        PLACED[0].prefill_seconds(0, 512)
