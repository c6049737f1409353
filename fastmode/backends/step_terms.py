"""The terms of one engine step that depend on how a replica is laid out: whose weights each
chip reads, what its GEMMs cost by size and precision, what its collectives cost. Functions of
a ``Placement`` (fastmode/backends/perf.py), split out to keep that module one page; no clock, no state.
"""

from __future__ import annotations

from typing import Protocol

from fastmode.backends.dequant import dequantises, w4a16_flops
from fastmode.backends.moe import (
    busiest_group_experts,
    busiest_group_tokens,
    expert_rows,
    touched_expert_share,
)
from fastmode.backends.profiles import HardwareProfile, ModelProfile, canonical_precision


class Layout(Protocol):
    """What the terms read of a replica's layout (``perf.Placement`` is the one): declared
    here so that this module need not import perf.py, which imports it (one circle)."""

    @property
    def model(self) -> ModelProfile: ...

    @property
    def hardware(self) -> HardwareProfile: ...

    @property
    def chips(self) -> int: ...

    @property
    def precision(self) -> str: ...

    @property
    def attention_dp(self) -> bool: ...

    @property
    def expert_parallel(self) -> int: ...

    @property
    def attention_weight_bytes(self) -> float: ...

    @property
    def parallel_chips(self) -> int: ...

    def weight_bytes_read(self, tokens: int) -> float: ...

ACTIVATION_BYTES = 2.0  # bf16 activations on the wire for all-reduces and hops
ATTENTION_PRECISION = "bf16"  # attention math runs in 16-bit (FlashAttention-class kernels)


def weights_seconds(p: Layout, tokens: int) -> float:
    """The busiest chip's weight reads: its share of the dense part (all the attention
    with attention data parallelism) and of the touched experts (whole experts of its
    group, the busiest group's, with expert parallelism), at mbu (experts at
    ``expert_read_efficiency`` of it)."""
    m, hw = p.model, p.hardware
    n = p.parallel_chips
    bw = hw.memory_bandwidth_tbs * 1e12 * hw.mbu
    total = p.weight_bytes_read(tokens)
    if not m.is_moe:
        experts = 0.0
    else:
        ebpp = m.expert_bytes_per_param_at(p.precision)
        ep = p.expert_parallel
        per_expert = m.params_per_expert_b * 1e9 * ebpp
        cv2 = hw.expert_load_cv2
        share = touched_expert_share(m.experts, m.experts_per_token, tokens, cv2)
        experts = m.experts * share * per_expert
        if ep > 1:
            busiest = busiest_group_experts(m.experts, m.experts_per_token, tokens, ep, cv2)
            experts_chip = busiest * per_expert / (n / ep)
        else:
            experts_chip = experts / n
    dense = total - experts
    if p.attention_dp and p.hardware.sharding == "tensor":
        a = p.attention_weight_bytes
        dense_chip = a + (dense - a) / n
    else:
        dense_chip = dense / n
    t = dense_chip / bw
    if m.is_moe:
        t += experts_chip / (bw * hw.expert_read_efficiency)
    return t


def gemm_rate(p: Layout, precision: str, rows: float) -> float:
    """Achieved FLOP/s of the replica's GEMMs of ``rows`` rows at ``precision`` (4-bit
    weights dequantised to bf16 on a chip without 4-bit tensor cores: a flat share of the
    bf16 peak, ``dequant.py``)."""
    hw = p.hardware
    if dequantises(hw, precision):
        return p.parallel_chips * w4a16_flops(hw)
    eff = hw.gemm_efficiency(precision)
    if hw.gemm_half_tokens > 0:
        eff *= rows / (rows + hw.gemm_half_tokens)
    return p.parallel_chips * hw.peak_flops(precision) * eff


def gemm_seconds(p: Layout, tokens: int, sampled: int | None = None) -> float:
    """The GEMMs of a step of ``tokens`` tokens at their achieved rates (0 for none): the
    body (quantized layers at the precision's rate, 16-bit ones at bf16) over
    max(T, gemm_min_tokens) rows, the LM head over the ``sampled`` rows (default all),
    the routed experts over their rows (a tile per touched expert at least, and the
    busiest expert-parallel group's tokens)."""
    if tokens <= 0:
        return 0.0
    m, hw = p.model, p.hardware
    rows = max(float(tokens), hw.gemm_min_tokens)
    quant, bf16, _ = m.gemm_params_b(p.precision)
    lm_precision = "bf16" if m.embedding_bytes_per_param(p.precision) >= 2 \
        else p.precision
    lm_rows = max(float(tokens if sampled is None else max(1, sampled)),
                  hw.gemm_min_tokens)
    t = 2e9 * quant * rows / gemm_rate(p, p.precision, rows)
    t += 2e9 * bf16 * rows / gemm_rate(p, "bf16", rows)
    t += 2e9 * m.lm_head_params_b * lm_rows / gemm_rate(p, lm_precision, lm_rows)
    if m.is_moe:
        k, ep = m.experts_per_token, p.expert_parallel
        e_rows, per_expert = expert_rows(m.experts, k, tokens, hw.gemm_min_tokens,
                                         hw.expert_load_cv2)
        if ep > 1:  # the busiest group's assignments against the mean group's
            e_rows *= busiest_group_tokens(k, tokens, ep) / (tokens * k / ep)
        ebits = canonical_precision(p.precision)
        t += 2e9 * m.params_per_expert_b * e_rows / (
            gemm_rate(p, ebits, per_expert) * hw.expert_compute_efficiency)
    return t


def attention_rate(p: Layout, length: float) -> float:
    """Achieved FLOP/s of prefill attention whose queries attend to ``length`` tokens on
    average."""
    hw = p.hardware
    eff = hw.mfu
    if hw.attention_half_tokens > 0 and length > 0:
        eff *= length / (length + hw.attention_half_tokens)
    return p.parallel_chips * hw.peak_flops(ATTENTION_PRECISION) * eff


def comm_seconds(p: Layout, tokens: int) -> tuple[float, float]:
    """(tensor-parallel collectives, layer-sharding hops) of a step of ``tokens`` tokens.

    Tensor parallelism: two all-reduces per layer (after attention, after the FFN), each
    2(N-1)/N of the message over a link at the bus bandwidth a collective reaches on it
    (``allreduce_bus_share`` of the line rate) plus a fixed latency; with attention data
    parallelism one all-gather and one reduce-scatter around the FFN (the same bytes as
    one all-reduce, two latencies). A group larger than the scale-up domain goes over the
    scale-out network."""
    hw, m = p.hardware, p.model
    if p.chips <= 1:
        return 0.0, 0.0
    msg = tokens * m.d_model * ACTIVATION_BYTES
    if hw.sharding != "tensor":
        per_hop = hw.interconnect_latency_us * 1e-6 + msg / (hw.interconnect_gbs * 1e9)
        return 0.0, (p.chips - 1) * per_hop
    c = p.chips
    if c > hw.scale_up_domain:
        link, alpha = hw.scale_out_gbs * 1e9, hw.scale_out_latency_us * 1e-6
    else:
        link = hw.interconnect_gbs * hw.allreduce_bus_share * 1e9
        alpha = hw.interconnect_latency_us * 1e-6
    data = 2 * (c - 1) / c * msg / link
    per_layer = data + 2 * alpha if p.attention_dp else 2 * (data + alpha)
    return m.layers * per_layer, 0.0


__all__ = ["ACTIVATION_BYTES", "ATTENTION_PRECISION", "attention_rate", "comm_seconds",
           "gemm_rate", "gemm_seconds", "weights_seconds"]
