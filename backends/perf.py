"""The roofline performance model: how long one engine step takes. Pure functions, no clock.

One engine step runs every sequence of the batch through the model once: each decoding sequence
produces one token, and a chunk of prompt tokens (chunked prefill) may ride along. Its time is

    t_step = max( max(t_weights, t_compute) + t_kv , t_layer_floor )
             + t_comm + t_hops + t_overhead

- t_weights: the weights read once per step, shared by the whole batch (the reason batching pays).
  For a mixture-of-experts model only the experts the step's tokens route to are read, so a small
  batch reads far less than the whole model and a large batch reads nearly all of it.
- t_compute: 2 FLOPs per active parameter per token, plus attention over each token's context.
- t_kv: every decoding sequence reads its own KV cache; never shared, never amortised.
- t_layer_floor: no layer finishes faster than a fixed latency (kernel launches on a GPU, the
  per-layer pipeline latency on a wafer-scale chip). It binds at small batches.
- t_comm: tensor parallelism's two all-reduces per layer (ring: 2(N-1)/N * bytes / link + 2(N-1)a).
- t_hops: layer-wise sharding across wafers: one hop per chip boundary.
- t_overhead: host-side scheduler work per step.

See docs/performance-model.md for the sources of every parameter and a worked example.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .profiles import HardwareProfile, ModelProfile, ProfileError, bytes_per_param

ACTIVATION_BYTES = 2.0  # bf16 activations on the wire for all-reduces and hops


@dataclass(frozen=True)
class StepTime:
    """One step's modeled duration, what bounds it, and the terms it is made of (seconds)."""

    total_s: float
    bound: str  # "memory" | "compute" | "latency"
    breakdown: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Placement:
    """A model on ``chips`` chips of one hardware profile at one precision: one replica."""

    model: ModelProfile
    hardware: HardwareProfile
    chips: int
    precision: str
    memory_utilization: float = 0.9  # share of memory the engine may use (vLLM's default 0.9)

    def __post_init__(self) -> None:
        if self.chips <= 0:
            raise ProfileError(f"chips: must be a positive integer, got {self.chips}")
        if not 0 < self.memory_utilization <= 1:
            raise ProfileError(
                f"memory_utilization: must be in (0, 1], got {self.memory_utilization}"
            )
        bytes_per_param(self.precision)  # validates the precision name
        self.hardware.peak_flops(self.precision)
        if self.weight_bytes > self.usable_memory_bytes:
            raise ProfileError(
                f"model {self.model.name!r} ({self.weight_bytes / 1e9:.0f} GB at "
                f"{self.precision}) does not fit in {self.chips} x {self.hardware.name} "
                f"({self.usable_memory_bytes / 1e9:.0f} GB usable); use more chips or a "
                f"lower precision"
            )

    # -- memory -----------------------------------------------------------------------------

    @property
    def weight_bytes(self) -> float:
        return self.model.weight_bytes(self.precision)

    @property
    def usable_memory_bytes(self) -> float:
        return self.chips * self.hardware.memory_gb * 1e9 * self.memory_utilization

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.precision)

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of context the replica can hold at once: memory minus weights, over KV/token."""
        free = self.usable_memory_bytes - self.weight_bytes
        return int(free // self.kv_bytes_per_token)

    # -- the pieces of the roofline ---------------------------------------------------------

    @property
    def _parallel_chips(self) -> int:
        """Chips whose bandwidth and FLOP/s add up for one step.

        Tensor parallelism splits every layer, so all chips work on each token. Layer-wise
        sharding puts whole layers on each chip: a token visits the chips one after another,
        so one chip's bandwidth and FLOP/s is what a step gets.
        """
        return self.chips if self.hardware.sharding == "tensor" else 1

    def weight_bytes_read(self, tokens: int) -> float:
        """Weights one step reads when it processes ``tokens`` tokens."""
        m = self.model
        bpp = bytes_per_param(self.precision)
        if not m.is_moe:
            return m.total_params_b * 1e9 * bpp
        # Each token routes to k of E experts; the expected share of experts touched by T
        # tokens is 1 - (1 - k/E)^T (uniform routing).
        touched = touched_expert_share(m.experts, m.experts_per_token, tokens)
        return (m.dense_params_b + m.expert_params_b * touched) * 1e9 * bpp

    def step(
        self,
        decode_seqs: int,
        decode_context_tokens: float,
        prefill_tokens: int = 0,
        prefill_context_tokens: float = 0.0,
    ) -> StepTime:
        """Duration of one step.

        decode_seqs: sequences that each produce one token this step.
        decode_context_tokens: the sum of their context lengths (KV read per step).
        prefill_tokens: prompt tokens processed this step (chunked prefill).
        prefill_context_tokens: context those prompt tokens attend to, summed per token
            (a chunk of c tokens after s earlier tokens: c*s + c*c/2).
        """
        if decode_seqs < 0 or prefill_tokens < 0 or decode_context_tokens < 0:
            raise ProfileError("step: sizes must be >= 0")
        hw, m = self.hardware, self.model
        tokens = decode_seqs + prefill_tokens
        if tokens == 0:
            return StepTime(0.0, "latency", {})
        n = self._parallel_chips
        bw = n * hw.memory_bandwidth_tbs * 1e12 * hw.mbu
        flops_rate = n * hw.peak_flops(self.precision) * hw.mfu

        t_weights = self.weight_bytes_read(tokens) / bw
        attn_width = m.layers * m.heads * m.head_dim
        flops = 2.0 * m.active_params_b * 1e9 * tokens + 4.0 * attn_width * (
            decode_context_tokens + prefill_context_tokens
        )
        t_compute = flops / flops_rate
        # Decode reads each sequence's KV; a prefill chunk reads the KV of its prefix once
        # (approximated by its mean attended context).
        prefix = prefill_context_tokens / prefill_tokens if prefill_tokens else 0.0
        t_kv = (decode_context_tokens + prefix) * self.kv_bytes_per_token / bw
        t_floor = m.layers * hw.layer_latency_us * 1e-6

        t_comm = 0.0
        t_hops = 0.0
        if self.chips > 1 and hw.sharding == "tensor":
            msg = tokens * m.d_model * ACTIVATION_BYTES
            c = self.chips
            one = (
                2 * (c - 1) / c * msg / (hw.interconnect_gbs * 1e9)
                + 2 * (c - 1) * hw.interconnect_latency_us * 1e-6
            )
            t_comm = 2 * m.layers * one
        elif self.chips > 1:
            per_hop = hw.interconnect_latency_us * 1e-6 + tokens * m.d_model * ACTIVATION_BYTES / (
                hw.interconnect_gbs * 1e9
            )
            t_hops = (self.chips - 1) * per_hop
        t_overhead = hw.step_overhead_ms * 1e-3

        roof = max(t_weights, t_compute) + t_kv
        core = max(roof, t_floor)
        if core == t_floor and t_floor > roof:
            bound = "latency"
        elif t_compute > t_weights + t_kv:
            bound = "compute"
        else:
            bound = "memory"
        total = core + t_comm + t_hops + t_overhead
        return StepTime(
            total,
            bound,
            {
                "weights_s": t_weights,
                "compute_s": t_compute,
                "kv_s": t_kv,
                "layer_floor_s": t_floor,
                "comm_s": t_comm,
                "hops_s": t_hops,
                "overhead_s": t_overhead,
            },
        )

    def decode_line(
        self, decode_seqs: int, prefill_tokens: int = 0, prefill_context_tokens: float = 0.0
    ) -> tuple[float, float, float, float, float, float]:
        """``step`` as a function of the decode context alone, for a fixed batch.

        Returns (t_weights, compute_0, compute_per_ctx, kv_per_ctx, t_floor, t_fixed) such that
        ``step(...).total_s == max(max(t_weights, compute_0 + compute_per_ctx * ctx)
        + kv_per_ctx * ctx + kv_0, t_floor) + t_fixed`` with kv_0 folded into compute_0 and
        t_weights (it is 0 for pure decode). The virtual clock uses it to run long stretches of
        decode steps without rebuilding the breakdown each step.
        """
        base = self.step(decode_seqs, 0.0, prefill_tokens, prefill_context_tokens)
        b = base.breakdown
        hw, m = self.hardware, self.model
        n = self._parallel_chips
        bw = n * hw.memory_bandwidth_tbs * 1e12 * hw.mbu
        flops_rate = n * hw.peak_flops(self.precision) * hw.mfu
        c1 = 4.0 * m.layers * m.heads * m.head_dim / flops_rate
        k1 = self.kv_bytes_per_token / bw
        kv0 = b["kv_s"]
        fixed = b["comm_s"] + b["hops_s"] + b["overhead_s"]
        return (b["weights_s"] + kv0, b["compute_s"] + kv0, c1, k1, b["layer_floor_s"], fixed)

    def step_seconds(
        self,
        decode_seqs: int,
        decode_context_tokens: float,
        prefill_tokens: int = 0,
        prefill_context_tokens: float = 0.0,
    ) -> float:
        return self.step(
            decode_seqs, decode_context_tokens, prefill_tokens, prefill_context_tokens
        ).total_s

    def prefill_seconds(
        self,
        prompt_tokens: int,
        chunk: int,
        decode_seqs: int = 0,
        decode_context_tokens: float = 0.0,
    ) -> float:
        """Time to prefill a prompt alone in chunks of ``chunk`` tokens beside a decode batch."""
        if prompt_tokens <= 0:
            raise ProfileError(f"prompt_tokens: must be > 0, got {prompt_tokens}")
        done, total = 0, 0.0
        while done < prompt_tokens:
            c = min(chunk, prompt_tokens - done)
            total += self.step_seconds(
                decode_seqs, decode_context_tokens, c, prefill_attention_context(c, done)
            )
            done += c
        return total


def prefill_attention_context(chunk: int, already: int) -> float:
    """Sum over a chunk's tokens of the context each attends to (causal)."""
    return chunk * already + chunk * chunk / 2


def touched_expert_share(experts: int, per_token: int, tokens: int) -> float:
    if experts <= 0:
        return 1.0
    return 1.0 - math.pow(1.0 - per_token / experts, tokens)
