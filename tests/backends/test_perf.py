"""Properties of the roofline model (fastmode/backends/perf.py): the physics must behave like physics."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastmode.backends.config import SimConfig
from fastmode.backends.engine import build
from fastmode.backends.memory import COMM_RESERVE_GB, chip_bytes
from fastmode.backends.perf import Placement, prefill_attention_context, touched_expert_share
from fastmode.backends.perf_serving import finite_run_throughput, serving_steady_state, static_batch
from fastmode.backends.profiles import Catalog, ProfileError
from fastmode.backends.simulate import Workload as SimWorkload
from fastmode.backends.simulate import simulate
from fastmode.workload import LengthDist

CAT = Catalog.builtin()

# (model, hardware, chips, precision): placements that fit, dense and MoE, GPU and wafer
PLACEMENTS = [
    ("llama-2-7b", "a100-40g", 1, "bf16"),
    ("llama-3.1-8b", "h100-sxm", 1, "bf16"),
    ("llama-3.1-70b", "h100-sxm", 4, "bf16"),
    ("llama-3.1-70b", "h100-sxm", 2, "fp8"),
    ("llama-3.1-405b", "b200", 8, "fp8"),
    ("mixtral-8x7b", "a100-80g", 2, "bf16"),
    ("gpt-oss-120b", "h100-sxm", 2, "mxfp4"),
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


def _own_costs(p: Placement, ctx: int) -> tuple[float, float]:
    """(attention of one sequence at ``ctx``, GEMM FLOPs of one token) at the achieved rates:
    a token's FLOPs are 2 per parameter it multiplies by, each layer type at its own rate (the
    16-bit embeddings' LM head at bf16, the rest at the precision's) at the large-GEMM
    efficiency, which is what one more row of a GEMM costs."""
    _, bw_kv, _, attn = p.rates()
    hw, m = p.hardware, p.model
    own_attn = ctx * max(p.kv_bytes_per_token / bw_kv, p.attention_flops_per_context_token / attn)
    quant, bf16, _ = m.gemm_params_b(p.precision)
    lm = "bf16" if m.embedding_bytes_per_param(p.precision) >= 2 else p.precision

    def rate(precision: str) -> float:
        return p.chips * hw.peak_flops(precision) * hw.gemm_efficiency(precision)

    own_gemm = 2e9 * (quant / rate(p.precision) + bf16 / rate("bf16")
                      + m.lm_head_params_b / rate(lm))
    return own_attn, own_gemm


@SETTINGS
@given(st.sampled_from([p for p in PLACED if not p.model.is_moe]), batches, st.integers(0, 4000))
def test_an_extra_sequence_costs_its_own_attention_flops_and_all_reduce_share(
    p: Placement, b: int, ctx: int
):
    """The weights are read once per step whatever the batch: an extra sequence adds at most
    its own attention, its GEMM FLOPs and its share of the all-reduce; below the transition
    (weights longer than the FLOPs) it is much cheaper than the mean sequence."""
    s1, s2 = p.step(b, b * ctx), p.step(b + 1, (b + 1) * ctx)
    marginal = s2.total_s - s1.total_s
    own_attn, own_gemm = _own_costs(p, ctx)
    comm = s2.breakdown["comm_s"] - s1.breakdown["comm_s"]
    hops = s2.breakdown["hops_s"] - s1.breakdown["hops_s"]
    host = p.hardware.seq_overhead_us * 1e-6  # the host's work for one more sequence
    assert marginal <= (own_attn + own_gemm + comm + hops + host) * (1 + 1e-9) + 1e-15
    memory_bound = s1.bound == "memory" and s1.breakdown["weights_s"] > 4 * s1.breakdown[
        "compute_s"]
    if memory_bound and b > 1:
        assert marginal < s1.total_s / b


@pytest.mark.parametrize("overlap", [0.0, 0.3, 1.0])
def test_roofline_overlap_blends_max_and_sum(overlap: float):
    base = place("llama-3.1-70b", "h100-sxm", 4, "bf16")
    hw = dataclasses.replace(base.hardware, roofline_overlap=overlap, layer_latency_us=0.0)
    p = Placement(base.model, hw, 4, "bf16")
    s = p.step(200, 0)
    w, c = s.breakdown["weights_s"], s.breakdown["compute_s"]
    core = s.total_s - s.breakdown["comm_s"] - s.breakdown["overhead_s"]
    assert core == pytest.approx(max(w, c) + (1 - overlap) * min(w, c))


def test_small_gemms_pay_for_a_whole_tile():
    base = place("llama-3.1-8b", "h100-sxm", 1, "bf16")
    hw = dataclasses.replace(base.hardware, gemm_min_tokens=64.0, gemm_half_tokens=0.0)
    p = Placement(base.model, hw, 1, "bf16")
    assert p.gemm_seconds(1) == pytest.approx(p.gemm_seconds(64))
    assert p.gemm_seconds(128) == pytest.approx(2 * p.gemm_seconds(64))
    assert p.gemm_seconds(0) == 0.0


def test_kv_reads_run_at_the_attention_kernels_bandwidth():
    base = place("llama-3.1-70b", "h100-sxm", 4, "bf16")
    slow = Placement(base.model, dataclasses.replace(base.hardware, mbu_kv=base.hardware.mbu / 2),
                     4, "bf16")
    fast = Placement(base.model, dataclasses.replace(base.hardware, mbu_kv=base.hardware.mbu),
                     4, "bf16")
    assert slow.step(8, 8 * 10_000).breakdown["kv_s"] == pytest.approx(
        2 * fast.step(8, 8 * 10_000).breakdown["kv_s"]
    )


def test_fp8_gemms_run_at_their_own_efficiency():
    base = place("llama-3.1-70b", "h100-sxm", 2, "fp8")
    hw = dataclasses.replace(base.hardware, mfu=0.6, mfu_fp8=0.3)
    p8 = Placement(base.model, hw, 2, "fp8")
    p16 = Placement(base.model, hw, 4, "bf16")
    # fp8: twice the peak at half the efficiency; on half the chips: twice the time per token
    # (the LM head, kept 16-bit in an fp8 checkpoint, runs at the bf16 rate in both)
    lm = 2e9 * base.model.lm_head_params_b * 4096 / (989e12 * 0.6 * hw_gemm_size(hw, 4096))
    assert p8.gemm_seconds(4096) - lm / 2 == pytest.approx(
        2 * (p16.gemm_seconds(4096) - lm / 4), rel=1e-2)


def hw_gemm_size(hw: Any, rows: int) -> float:
    """The GEMM efficiency's size factor: rows / (rows + gemm_half_tokens)."""
    return rows / (rows + hw.gemm_half_tokens) if hw.gemm_half_tokens else 1.0


@pytest.mark.parametrize("chips,precision", [(2, "bf16"), (4, "bf16"), (8, "bf16"), (2, "fp8")])
def test_memory_to_compute_transition_near_flops_over_bandwidth(chips: int, precision: str):
    p = place("llama-3.1-70b", "h100-sxm", chips, precision)
    hw = p.hardware
    bpp = {"bf16": 2.0, "fp8": 1.0}[precision]
    # the batch whose GEMM FLOPs take as long as its weight reads; the GEMMs' size ramp
    # (rows / (rows + gemm_half_tokens) of the large-GEMM rate) moves it down by
    # gemm_half_tokens rows
    predicted = (
        hw.peak_flops(precision) * hw.gemm_efficiency(precision)
        / (hw.memory_bandwidth_tbs * 1e12 * hw.mbu) * bpp / 2
    ) - hw.gemm_half_tokens
    ctx = 500
    crossover = next(
        b
        for b in range(1, 5000)
        if p.step(b, b * ctx).breakdown["compute_s"] > p.step(b, b * ctx).breakdown["weights_s"]
    )
    assert predicted / 2 <= crossover <= predicted * 2
    if precision == "bf16":
        assert 100 < crossover < 500  # "~300 on H100 in bf16" (the reference), with MFU/MBU
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
    bpp = {"bf16": 2.0, "fp8": 1.0, "mxfp4": 4.25 / 8}[precision]
    # the checkpoint's bytes by layer type: 16-bit layers (the embeddings, or what the model
    # profile keeps) at 2 bytes, the rest of the dense part and the experts at the precision
    kept = 0.0 if bpp >= 2 else min(m.dense_params_b, m.bf16_params_b if m.bf16_params_b
                                    is not None else m.embedding_params_b)
    weights = (kept * 2 + (m.dense_params_b - kept) * bpp + m.expert_params_b * bpp) * 1e9
    free = chips * chip_bytes(h.memory_gb) * util - weights  # what CUDA reports (memory.py)
    elem = m.kv_bytes_per_element or (2.0 if precision == "mxfp4" else bpp)
    kv = 2 * m.layers * m.kv_heads * m.head_dim * elem
    copies = max(1.0, chips / m.kv_heads) if h.sharding == "tensor" else 1.0
    assert p.kv_capacity_tokens == int(free // (kv * copies))
    assert p.kv_capacity_tokens >= 0


def test_engine_memory_activations_and_reserve_come_out_of_the_kv_cache():
    """vLLM's rule: the utilisation share of each chip, minus weights, the activations of a
    forward pass at the step budget and the engine's reserve; TensorRT-LLM's: a share of what
    is left after them."""
    m, h = CAT.get_model("llama-3.1-70b"), CAT.get_hardware("h100-sxm")
    bare = Placement(m, h, 2, "fp8")
    vllm = Placement(m, h, 2, "fp8", activation_tokens=8192, reserved_gb=1.92)
    trt = Placement(m, h, 2, "fp8", memory_utilization=1.0, kv_memory_fraction=0.9,
                    activation_tokens=8192, reserved_gb=1.92)
    reserve = (1.92 + COMM_RESERVE_GB) * 1e9  # two chips: the communication buffers on top
    act = vllm.engine_bytes_per_chip - reserve
    assert 0.5e9 < act < 3e9  # ~1-2 GB of activations per GPU at 8,192 tokens
    kvb = bare.kv_bytes_per_token
    assert vllm.kv_capacity_tokens == int((bare.kv_memory_bytes - 2 * (act + reserve)) // kvb)
    free = chip_bytes(80.0) - bare.weight_bytes_per_chip - act - reserve
    assert trt.kv_capacity_tokens == int(2 * free * 0.9 // kvb)


def test_meta_fp8_405b_keeps_attention_in_bf16():
    """Meta's FP8 checkpoint: ~487 GB, not the 410 GB of an all-FP8 one; on 8 x H100 that
    leaves about half the KV cache."""
    meta, plain = CAT.get_model("llama-3.1-405b-meta-fp8"), CAT.get_model("llama-3.1-405b")
    assert meta.weight_bytes("fp8") == pytest.approx(487e9, rel=0.01)
    assert plain.weight_bytes("fp8") == pytest.approx(410e9, rel=0.01)
    h = CAT.get_hardware("h100-sxm")
    a = Placement(meta, h, 8, "fp8", activation_tokens=8192, reserved_gb=1.92)
    b = Placement(plain, h, 8, "fp8", activation_tokens=8192, reserved_gb=1.92)
    assert a.kv_capacity_tokens < 0.55 * b.kv_capacity_tokens


def test_mla_kv_is_replicated_across_tensor_parallel_chips_but_not_with_attention_dp():
    """MLA keeps one latent per token and layer: tensor parallelism stores it on every chip
    (and every chip reads it); attention data parallelism stores each sequence once."""
    m, h = CAT.get_model("deepseek-v3"), CAT.get_hardware("h200")
    tp = Placement(m, h, 8, "fp8", kv_precision="bf16")
    dp = Placement(m, h, 8, "fp8", kv_precision="bf16", attention_dp=True)
    assert tp.kv_replication == 8 and dp.kv_replication == 1
    # dp holds the whole attention on every chip: less memory for KV, but 8x the tokens per byte
    assert dp.kv_capacity_tokens > 6 * tp.kv_capacity_tokens
    ctx = 64 * 4000
    assert tp.step(64, ctx).breakdown["kv_s"] == pytest.approx(
        8 * dp.step(64, ctx).breakdown["kv_s"])


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
        Placement(m, h, 1, "fp3")
    with pytest.raises(ProfileError, match="expert_parallel"):
        Placement(m, h, 2, "bf16", expert_parallel=2)  # a dense model has no experts
    with pytest.raises(ProfileError, match="model: unknown.*allowed"):
        CAT.get_model("gpt-9")
    with pytest.raises(ProfileError, match="hardware: unknown.*allowed"):
        CAT.get_hardware("tpu-v9")
    with pytest.raises(ProfileError):
        Placement(m, h, 1, "bf16").step(-1, 0)


def test_wafer_is_latency_bound_with_one_hop_per_chip_boundary():
    p = place("frontier-spark", "wse-3", 4, "fp8")
    hw, m = p.hardware, p.model
    assert hw.moe_layer_latency_us == 0.0  # a wafer has no kernels to launch
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
    """Two all-reduces per layer: the data over the ring's links plus one fixed latency each."""
    p = place("llama-3.1-70b", "h100-sxm", 4, "bf16")
    hw, m = p.hardware, p.model
    b = 16
    msg = b * m.d_model * 2
    bus = hw.interconnect_gbs * hw.allreduce_bus_share * 1e9
    one = 2 * 3 / 4 * msg / bus + hw.interconnect_latency_us * 1e-6
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
    # a dense model reads everything but its input embedding table (a lookup of the rows)
    table = dense.model.input_embedding_params_b * 2e9
    assert dense.weight_bytes_read(1) == dense.weight_bytes_read(500) == pytest.approx(
        dense.weight_bytes - table)


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


# -- KV cache precision --------------------------------------------------------------------


def test_fp8_kv_cache_halves_kv_bytes_and_doubles_what_fits():
    m, h = CAT.get_model("llama-3.1-70b"), CAT.get_hardware("h100-sxm")
    bf16 = Placement(m, h, 4, "bf16", kv_precision="bf16")
    fp8 = Placement(m, h, 4, "bf16", kv_precision="fp8")
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2
    assert fp8.kv_capacity_tokens == pytest.approx(2 * bf16.kv_capacity_tokens, abs=2)
    # the default stays as before: the weight precision (or the model's own KV element size)
    assert Placement(m, h, 4, "bf16").kv_bytes_per_token == bf16.kv_bytes_per_token
    assert Placement(m, h, 2, "fp8").kv_bytes_per_token == fp8.kv_bytes_per_token
    frontier = CAT.get_model("frontier")
    b200 = CAT.get_hardware("b200")
    assert Placement(frontier, b200, 8, "fp8").kv_bytes_per_token == 2 * 64 * 8 * 128 * 1.0
    with pytest.raises(ProfileError, match="kv_precision"):
        Placement(m, h, 4, "bf16", kv_precision="fp3")


def test_mxfp4_experts_fit_one_gpu_and_bf16_experts_do_not():
    """gpt-oss-120b ships its experts in MXFP4: ~65 GB, one 80 GB GPU holds it; served with
    bf16 experts (``--precision bf16``) it is 234 GB."""
    p = place("gpt-oss-120b", "h100-sxm", 1, CAT.get_model("gpt-oss-120b").default_precision)
    assert p.precision == "mxfp4" and 60e9 < p.weight_bytes < 70e9
    with pytest.raises(ProfileError, match="does not fit"):
        place("gpt-oss-120b", "h100-sxm", 1, "bf16")
    assert place("gpt-oss-120b", "h100-sxm", 4, "bf16").weight_bytes == pytest.approx(
        234e9, rel=0.01)


# -- workloads ---------------------------------------------------------------------------------


def test_one_user_sees_the_decode_step_and_a_lone_prefill():
    p = place("llama-3.1-70b", "h100-sxm", 2, "fp8")
    w = serving_steady_state(p, 1, 500, 200)
    assert w.running == 1 and w.queued == 0
    prefill = p.prefill_seconds(500, 8192)
    assert w.ttft_s == pytest.approx(prefill)  # what the scheduler gives: no API-server time
    measured = serving_steady_state(p, 1, 500, 200, request_overhead=True)
    # measurements add the time before the first token besides the steps: the profile's fixed
    # request overhead and its API server's per prompt token
    hw = p.hardware
    besides = hw.request_overhead_ms * 1e-3 + hw.request_us_per_prompt_token * 1e-6 * 500
    assert measured.ttft_s == pytest.approx(prefill + besides)
    assert p.step_seconds(1, 501) <= w.itl_s <= p.step_seconds(1, 700)
    assert w.output_tokens_per_s == pytest.approx(200 / (w.ttft_s + 199 * w.itl_s))


@SETTINGS
@given(st.sampled_from(PLACED[:8]), st.integers(1, 64), st.integers(16, 6000),
       st.integers(32, 1000))
def test_more_users_never_speed_a_user_up(p: Placement, c: int, prompt: int, out: int):
    if prompt + out > p.model.context_window or prompt + out > p.kv_capacity_tokens:
        return
    # within the granularity of packing whole prompts into prefill steps (a few %)
    a = serving_steady_state(p, c, prompt, out)
    b = serving_steady_state(p, c + 1, prompt, out)
    assert b.e2e_s >= a.e2e_s * 0.95
    assert b.output_tokens_per_s >= a.output_tokens_per_s * 0.9


def test_a_batch_beyond_the_kv_cache_queues_instead_of_being_refused():
    """100 users of 5,000 + 500 tokens on a 70B fp8 model on 2 x H100 run in
    production (NIM, whose TensorRT-LLM reserves each whole reply's KV); the users that fit
    run, the others wait for a slot."""
    p = dataclasses.replace(place("llama-3.1-70b", "h100-sxm", 2, "fp8"), kv_paged=False)
    fits = p.kv_capacity_tokens // 5500
    assert fits < 100
    w = serving_steady_state(p, 100, 5000, 500)
    assert w.running == fits and w.queued == 100 - fits
    full = serving_steady_state(p, fits, 5000, 500)
    assert w.output_tokens_per_s == pytest.approx(full.output_tokens_per_s)
    assert w.ttft_s > full.ttft_s + full.e2e_s * (100 - fits) / fits * 0.99


def test_a_paged_engine_runs_the_batch_that_fits_at_the_mean_context():
    """vLLM takes KV as replies grow: a closed loop's users are at every stage of their
    replies, so the batch is what fits at the prompt and half the reply, more than a
    reserving engine runs on the same memory."""
    paged = place("llama-3.1-70b", "h100-sxm", 2, "fp8")
    reserved = dataclasses.replace(paged, kv_paged=False)
    cap = paged.kv_capacity_tokens
    assert cap // 5250 < 100
    w = serving_steady_state(paged, 100, 5000, 500)
    assert w.running == cap // 5250 > serving_steady_state(reserved, 100, 5000, 500).running
    assert serving_steady_state(paged, 10, 5000, 500).running == 10  # room for all: all run


def test_prompts_of_other_users_ride_along_in_the_decode_steps():
    """Long prompts under concurrency make the mean step longer than a pure decode step."""
    p = place("llama-3.1-70b", "h100-sxm", 2, "fp8")
    w = serving_steady_state(p, 50, 5000, 500)
    assert w.itl_s > 1.5 * w.decode_step_s
    assert 0 < w.prefill_share < 1


def test_users_whose_prompts_fit_one_step_stay_in_lockstep():
    p = place("llama-3.1-8b", "h100-sxm", 1, "bf16")
    w = serving_steady_state(p, 4, 1000, 100, max_batched_tokens=8192)
    wave = p.step_seconds(0, 0, 4000, 4 * prefill_attention_context(1000, 0))
    assert w.ttft_s == pytest.approx(wave)
    assert w.prefill_share == pytest.approx(1 / 100)


def test_static_batch_end_to_end_is_prefill_plus_decode_steps():
    p = place("llama-2-7b", "a100-80g", 1, "bf16")
    w = static_batch(p, 16, 128, 256)
    assert w.ttft_s == pytest.approx(p.step_seconds(0, 0, 16 * 128, 16 * 128 * 128 / 2))
    assert w.e2e_s == pytest.approx(w.ttft_s + 255 * w.itl_s)
    assert w.output_tokens_per_s == pytest.approx(16 * 256 / w.e2e_s)
    assert p.step_seconds(16, 16 * 129) <= w.itl_s <= p.step_seconds(16, 16 * 383)


# -- requests that arrive on their own (spread arrivals) ---------------------------------------


def test_a_lone_user_in_spread_arrivals_sees_its_own_prefill():
    p = place("llama-3.1-70b", "h100-sxm", 2, "fp8")
    spread = serving_steady_state(p, 1, 500, 200, arrivals="spread")
    lock = serving_steady_state(p, 1, 500, 200)
    assert spread.ttft_s == pytest.approx(p.prefill_seconds(500, 8192))
    assert spread.itl_s == pytest.approx(lock.itl_s)
    assert spread.prefill_wait_s == 0


def test_long_prompts_queue_for_each_other_as_users_are_added():
    """Each 5,000-token prompt takes a step of its own: more users, more prefill work ahead
    of an arriving prompt (the queue's wait grows faster than linearly)."""
    p = place("llama-3.1-70b", "h100-sxm", 2, "fp8")
    waits = [serving_steady_state(p, c, 5000, 500, arrivals="spread").prefill_wait_s
             for c in (5, 25, 50)]
    assert 0 < waits[0] < waits[1] < waits[2]
    assert waits[2] - waits[1] > waits[1] - waits[0]


def test_short_prompts_spread_out_do_not_wait_for_a_group():
    """1,000-token prompts of 64 users: arriving on their own, each takes a short step; in
    lockstep, a group's prompts share one long step."""
    p = place("llama-3.1-8b", "h100-sxm", 1, "bf16")
    spread = serving_steady_state(p, 64, 1000, 200, arrivals="spread")
    lock = serving_steady_state(p, 64, 1000, 200)
    assert spread.ttft_s < lock.ttft_s
    assert spread.output_tokens_per_s == pytest.approx(lock.output_tokens_per_s, rel=0.1)


def test_async_scheduling_admits_a_request_one_step_later():
    p = place("llama-3.1-8b", "h100-sxm", 1, "bf16")
    for arrivals in ("lockstep", "spread"):
        now = serving_steady_state(p, 16, 1000, 200, arrivals=arrivals)
        later = serving_steady_state(p, 16, 1000, 200, arrivals=arrivals, lag_steps=1)
        assert later.ttft_s - now.ttft_s == pytest.approx(now.itl_s, rel=0.35)


def test_unknown_arrivals_are_refused():
    with pytest.raises(ProfileError, match="arrivals"):
        serving_steady_state(PLACED[0], 1, 10, 10, arrivals="poisson")


def test_a_finite_run_drains_half_a_cycle():
    p = place("llama-3.1-8b", "h100-sxm", 1, "bf16")
    w = serving_steady_state(p, 16, 1000, 200, arrivals="spread")
    assert finite_run_throughput(w, 160) == pytest.approx(w.output_tokens_per_s * 10 / 10.5)
    assert finite_run_throughput(w, 10**9) == pytest.approx(w.output_tokens_per_s)


def test_a_kernel_that_rereads_gqa_groups_reads_more_kv():
    """TensorRT-LLM's masked-MHA decode kernel before XQA read a GQA group's KV once per
    query head: the KV term of a decode step grows by the group size, nothing else does."""
    m, h = CAT.get_model("llama-2-70b"), CAT.get_hardware("h200")
    once = Placement(m, h, 1, "fp8")
    per_head = Placement(m, h, 1, "fp8", kv_read_factor=m.heads / m.kv_heads)
    a, b = once.step(64, 64 * 2000.0), per_head.step(64, 64 * 2000.0)
    assert b.breakdown["kv_s"] == pytest.approx(a.breakdown["kv_s"] * 8)
    assert b.breakdown["weights_s"] == a.breakdown["weights_s"]
    assert per_head.kv_capacity_tokens == once.kv_capacity_tokens
    w, c0, c1, k1, floor, fixed = per_head.decode_line(64)
    assert max(max(w, c0 + c1 * 128000) + k1 * 128000, floor) + fixed == pytest.approx(
        per_head.step_seconds(64, 128000))
    with pytest.raises(ProfileError, match="kv_read_factor"):
        Placement(m, h, 1, "fp8", kv_read_factor=0.5)


# -- the steady state against the scheduler (predict vs simulate) ------------------------------


def _simulated(model: str, hw: str, chips: int, precision: str, users: int, prompt: int,
               output: int, lengths: str) -> dict[str, Any]:
    raw = {
        "deployments": {"d": {"model": model, "hardware": hw, "chips": chips,
                              "precision": precision, "replicas": 1, "max_batch": 256,
                              "max_batched_tokens": 8192, "max_waiting": 100000}},
        "tiers": {"standard": {"deployment": "d", "prices": {
            "input": 1.0, "cached_input": 0.1, "output": 2.0}}},
    }
    spec = build(SimConfig.model_validate(raw))
    wl = SimWorkload(mix={"standard": 1.0}, prompt=LengthDist(lengths, prompt),
                     output=LengthDist(lengths, output), concurrency=users,
                     requests=users * 12, duration=1e9, seed=3)
    return simulate(spec, wl).tiers["standard"]


@pytest.mark.parametrize("case", [
    ("llama-3.1-70b", "h100-sxm", 2, "fp8", 25, 5000, 500),
    ("llama-3.1-8b", "h100-sxm", 1, "bf16", 64, 1000, 200),
    ("gpt-oss-120b", "h200", 2, "mxfp4", 64, 1024, 1024),
])
def test_the_steady_state_matches_the_scheduler_it_models(case: tuple[Any, ...]):
    """`fastmode predict`'s closed loop and `fastmode simulate`'s scheduler agree on the
    aggregate throughput within a few %: lockstep with fixed lengths, spread arrivals with
    lengths that vary (the simulator's uniform lengths, the model given their mean)."""
    model, hw, chips, precision, users, prompt, output = case
    p = place(model, hw, chips, precision)
    for lengths, arrivals in (("fixed", "lockstep"), ("uniform", "spread")):
        sim = _simulated(model, hw, chips, precision, users, prompt, output, lengths)
        w = serving_steady_state(p, users, prompt, output, arrivals=arrivals)
        assert w.output_tokens_per_s == pytest.approx(sim["output_tokens_per_s"], rel=0.08)
