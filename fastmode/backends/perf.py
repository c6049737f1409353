"""The roofline performance model: how long one engine step takes. Pure functions, no clock.

One engine step runs every sequence of the batch through the model once: each decoding sequence
produces one token, and a chunk of prompt tokens (chunked prefill) may ride along. Its time is

    t_step = max( overlap(t_weights, t_gemm) + t_attention , t_layer_floor )
             + t_comm + t_hops + t_overhead

- t_weights: the weights the busiest chip reads, shared by the whole batch, at ``mbu`` (only the
  experts the step's tokens touch; the attention on every chip with attention data parallelism;
  a whole expert group's with expert parallelism); the checkpoint's bytes by layer type.
- t_gemm: 2 FLOPs per parameter per token, each layer type at its precision's rate, at an
  efficiency that grows with the GEMM's rows (``gemm_half_tokens``; a tile of
  ``gemm_min_tokens`` rows at least, per touched expert for grouped expert GEMMs).
  overlap(a, b) = max(a, b) + (1 - roofline_overlap) * min(a, b).
- t_attention: decode attention reads each sequence's KV (replicated KV heads once per copy) at
  ``mbu_kv`` or does its FLOPs, whichever is slower; prefill attention at an efficiency that
  grows with the attended length (``attention_half_tokens``).
- t_layer_floor: no layer finishes faster than its kernels' latency (more kernels in an MoE or
  an MLA layer); it binds at small batches and on wafers.
- t_comm: tensor parallelism's collectives per layer (2(N-1)/N of the message plus a latency;
  the scale-out network beyond the scale-up domain); t_hops: layer sharding's hops.
- t_overhead: host work per step and per sequence.

``step_terms`` holds the layout-dependent terms, ``memory`` the engine's memory accounting,
``moe`` the expert arithmetic; ``serving_steady_state`` and ``static_batch`` (perf_serving)
turn steps into what benchmarks measure. See docs/performance-model.md for every term.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastmode.backends.memory import (
    activation_bytes_per_chip,
    attention_weight_bytes,
    chip_bytes,
    kv_memory_given,
    kv_memory_per_chip,
    kv_replication,
    reserve_bytes_per_chip,
)
from fastmode.backends.moe import touched_expert_share
from fastmode.backends.profiles import HardwareProfile, ModelProfile, ProfileError, bytes_per_param
from fastmode.backends.step_terms import (
    ACTIVATION_BYTES,
    ATTENTION_PRECISION,
    attention_rate,
    comm_seconds,
    gemm_rate,
    gemm_seconds,
    weights_seconds,
)


@dataclass(frozen=True)
class StepTime:
    """One step's modeled duration, what bounds it, and the terms it is made of (seconds)."""

    total_s: float
    bound: str  # "memory" | "compute" | "latency"
    breakdown: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Placement:
    """A model on ``chips`` chips of one hardware profile at one precision: one replica.

    ``kv_precision`` sets the KV cache's element type ("fp8" halves its bytes against "bf16",
    so twice the context fits); None keeps the model's ``kv_bytes_per_element`` or, without
    one, the weight precision.

    Placement options (docs/performance-model.md, "Parallelism"): ``attention_dp`` runs the
    attention data-parallel (each chip its own sequences, attention weights on every chip, no
    KV replication) around tensor- or expert-parallel FFNs; ``expert_parallel`` spreads the
    routed experts over that many groups of chips (whole experts per group, the busiest group
    sets the pace). Memory (fastmode/backends/memory.py): ``activation_tokens`` is the step token
    budget whose activations the engine reserves, ``reserved_gb`` the engine's own reserve
    per chip (with communication buffers on top when the replica spans chips; 0: none),
    ``kv_memory_fraction`` TensorRT-LLM's share of the memory left after them
    (None: vLLM's ``memory_utilization`` of the whole chip).
    """

    model: ModelProfile
    hardware: HardwareProfile
    chips: int
    precision: str
    memory_utilization: float = 0.9  # share of memory the engine may use (vLLM's default 0.9)
    kv_precision: str | None = None
    # KV bytes a decode step's attention reads per byte of KV cache it attends to. 1: every KV
    # head read once for its whole group of query heads (FlashAttention, FlashInfer, XQA); up
    # to heads / kv_heads when a kernel re-reads a GQA group's KV for each query head (the
    # generic masked-MHA kernels of TensorRT-LLM before XQA). An engine property.
    kv_read_factor: float = field(default=1.0, kw_only=True)
    attention_dp: bool = field(default=False, kw_only=True)
    expert_parallel: int = field(default=1, kw_only=True)
    activation_tokens: int = field(default=0, kw_only=True)
    reserved_gb: float = field(default=0.0, kw_only=True)
    kv_memory_fraction: float | None = field(default=None, kw_only=True)
    # memory.py: CUDA graph memory per chip counted against the KV cache (GB; 0: vLLM's
    # default, graphs captured after the KV cache is sized), and the KV cache per chip given
    # outright (GB, vLLM's kv_cache_memory_bytes; None: sized by the rule)
    cuda_graph_gb: float = field(default=0.0, kw_only=True)
    kv_cache_gb: float | None = field(default=None, kw_only=True)
    # KV taken as replies grow (vLLM, SGLang: a closed loop's running batch is what fits at
    # the mean context) or reserved for the whole reply at admission (TensorRT-LLM's
    # GUARANTEED_NO_EVICT): perf_serving.batch_that_fits
    kv_paged: bool = field(default=True, kw_only=True)

    def __post_init__(self) -> None:
        if self.chips <= 0:
            raise ProfileError(f"chips: must be a positive integer, got {self.chips}")
        if not 0 < self.memory_utilization <= 1:
            raise ProfileError(
                f"memory_utilization: must be in (0, 1], got {self.memory_utilization}"
            )
        bytes_per_param(self.precision)  # validates the precision name
        if not self.kv_read_factor >= 1:
            raise ProfileError(f"kv_read_factor: must be >= 1, got {self.kv_read_factor}")
        if self.kv_precision is not None:
            try:
                bytes_per_param(self.kv_precision)
            except ProfileError:
                raise ProfileError(
                    f"kv_precision: unknown {self.kv_precision!r}; allowed: bf16, fp16, fp8, int8"
                ) from None
        ep = self.expert_parallel
        if ep < 1 or ep > self.chips or self.chips % ep:
            raise ProfileError(f"expert_parallel: must divide the chips ({self.chips}), got {ep}")
        if ep > 1 and not self.model.is_moe:
            raise ProfileError(f"expert_parallel: {self.model.name} has no experts")
        if (self.attention_dp or ep > 1) and self.hardware.sharding != "tensor":
            raise ProfileError("attention_dp / expert_parallel: need tensor-sharded chips")
        if self.kv_memory_fraction is not None and not 0 < self.kv_memory_fraction <= 1:
            raise ProfileError("kv_memory_fraction: must be in (0, 1]")
        if self.cuda_graph_gb < 0 or (self.kv_cache_gb is not None and self.kv_cache_gb <= 0):
            raise ProfileError("cuda_graph_gb: must be >= 0; kv_cache_gb: must be > 0")
        self.hardware.peak_flops(self.precision)
        if self.kv_memory_bytes < 0:
            need = self.chips * (self.weight_bytes_per_chip + self.engine_bytes_per_chip)
            raise ProfileError(
                f"model {self.model.name!r} ({self.weight_bytes / 1e9:.0f} GB at "
                f"{self.precision}, {need / 1e9:.0f} GB with the engine's activations and "
                f"reserve) does not fit in {self.chips} x {self.hardware.name} "
                f"({self.usable_memory_bytes / 1e9:.0f} GB usable); use more chips or a "
                f"lower precision"
            )

    # -- memory -----------------------------------------------------------------------------

    @property
    def weight_bytes(self) -> float:
        """The checkpoint's bytes (one copy; attention data parallelism stores more)."""
        return self.model.weight_bytes(self.precision)

    @property
    def attention_weight_bytes(self) -> float:
        return attention_weight_bytes(self.model, self.precision)

    @property
    def weight_bytes_per_chip(self) -> float:
        """Weights one chip holds: a share of the checkpoint, the whole attention with
        attention data parallelism (layer sharding: a share too)."""
        w = self.weight_bytes
        if self.attention_dp:
            a = self.attention_weight_bytes
            return a + (w - a) / self.chips
        return w / self.chips

    @property
    def engine_bytes_per_chip(self) -> float:
        """Activations at the step budget, the engine's reserve (its own, and the
        communication buffers of a replica over several chips) and the CUDA graphs counted
        against the KV cache, per chip."""
        act = activation_bytes_per_chip(self.model, self.activation_tokens, self.chips,
                                        self.attention_dp)
        return (act + reserve_bytes_per_chip(self.reserved_gb, self.chips)
                + self.cuda_graph_gb * 1e9)

    @property
    def usable_memory_bytes(self) -> float:
        return self.chips * chip_bytes(self.hardware.memory_gb) * self.memory_utilization

    @property
    def kv_memory_bytes(self) -> float:
        """Memory the replica gives its KV cache (may be negative: does not fit)."""
        taken = self.weight_bytes_per_chip + self.engine_bytes_per_chip
        total = chip_bytes(self.hardware.memory_gb)
        if self.kv_cache_gb is not None:
            return self.chips * kv_memory_given(total, taken, self.kv_cache_gb * 1e9)
        return self.chips * kv_memory_per_chip(total, taken, self.memory_utilization,
                                               self.kv_memory_fraction)

    @property
    def attention_tp(self) -> int:
        """Chips one sequence's attention is split over."""
        if self.attention_dp or self.hardware.sharding != "tensor":
            return 1
        return self.chips

    @property
    def kv_replication(self) -> float:
        return kv_replication(self.model, self.attention_tp)

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.precision, self.kv_precision)

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of context the replica holds at once: its KV memory over the bytes a token
        takes in it (replicated KV heads counted once per copy)."""
        free = self.kv_memory_bytes
        return max(0, int(free // (self.kv_bytes_per_token * self.kv_replication)))

    # -- the pieces of the roofline ---------------------------------------------------------

    @property
    def parallel_chips(self) -> int:
        """Chips whose bandwidth and FLOP/s add up for one step.

        Tensor parallelism splits every layer, so all chips work on each token. Layer-wise
        sharding puts whole layers on each chip: a token visits the chips one after another,
        so one chip's bandwidth and FLOP/s is what a step gets.
        """
        return self.chips if self.hardware.sharding == "tensor" else 1

    def rates(self) -> tuple[float, float, float, float]:
        """Achieved (weight bytes/s, KV bytes/s, large-GEMM FLOP/s, attention FLOP/s) of the
        replica, at the asymptotic efficiencies (large GEMMs, long attention)."""
        hw = self.hardware
        n = self.parallel_chips
        peak_bw = n * hw.memory_bandwidth_tbs * 1e12
        gemm = n * hw.peak_flops(self.precision) * hw.gemm_efficiency(self.precision)
        attn = n * hw.peak_flops(ATTENTION_PRECISION) * hw.mfu
        return peak_bw * hw.mbu, peak_bw * hw.kv_bandwidth_efficiency, gemm, attn

    def weight_bytes_read(self, tokens: int) -> float:
        """Weights one step reads when it processes ``tokens`` tokens (the whole replica; the
        input embedding table is a lookup, not read)."""
        m = self.model
        share = (touched_expert_share(m.experts, m.experts_per_token, tokens,
                                      self.hardware.expert_load_cv2) if m.is_moe else 1)
        return m.read_bytes(self.precision, share)

    def gemm_seconds(self, tokens: int, sampled: int | None = None) -> float:
        """The GEMMs of a step of ``tokens`` tokens (``step_terms.gemm_seconds``)."""
        return gemm_seconds(self, tokens, sampled)

    @property
    def attention_flops_per_context_token(self) -> float:
        """Decode attention FLOPs per token of context (MLA: over its latent)."""
        return self.model.attention_flops_per_context_token(decode=True)

    def _kv_seconds_per_token(self) -> float:
        """Seconds of decode attention per token of context: its KV read (each replicated
        copy read by its chip) or its math, whichever is slower."""
        _, bw_kv, _, attn_rate = self.rates()
        read = self.kv_bytes_per_token * self.kv_replication * self.kv_read_factor / bw_kv
        return max(read, self.attention_flops_per_context_token / attn_rate)

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
        _, bw_kv, _, attn_rate = self.rates()
        kvb = self.kv_bytes_per_token * self.kv_replication

        t_weights = weights_seconds(self, tokens)
        t_gemm = gemm_seconds(self, tokens, decode_seqs + (1 if prefill_tokens else 0))
        # Decode attention: per token of context, a KV read and its FLOPs; whichever is slower.
        kv_read_dec = decode_context_tokens * kvb * self.kv_read_factor / bw_kv
        attn_math_dec = decode_context_tokens * self.attention_flops_per_context_token / attn_rate
        t_attn_dec = max(kv_read_dec, attn_math_dec)
        # Prefill attention: FLOPs over the attended context at the efficiency of its mean
        # attended length; the prefix's KV read once (approximated by that mean).
        prefix = prefill_context_tokens / prefill_tokens if prefill_tokens else 0.0
        kv_read_pre = prefix * kvb / bw_kv
        attn_math_pre = (prefill_context_tokens * m.attention_flops_per_context_token(False)
                         / attention_rate(self, prefix)) if prefill_tokens else 0.0
        t_attn_pre = max(kv_read_pre, attn_math_pre)
        if self.attention_dp and prefill_tokens and self.parallel_chips > 1:
            # a prompt chunk is one rank's: its attention (projections and math) runs on one
            # chip while the others wait for it (TensorRT-LLM's "ADP Balance" tech blog 10: the
            # slowest rank sets every iteration), not spread over all of them
            rows = float(prefill_tokens)
            proj = 2e9 * m.attention_params * rows / gemm_rate(self, self.precision, rows)
            t_attn_pre += (self.parallel_chips - 1) * (proj + t_attn_pre)
        t_floor = m.layers * 1e-6 * (hw.layer_latency_us
                                      + (hw.moe_layer_latency_us if m.is_moe else 0.0)
                                      + (hw.mla_layer_latency_us if m.is_mla else 0.0))
        t_comm, t_hops = comm_seconds(self, tokens)
        # host work: per step, and per sequence of it (each attention-DP rank runs its own)
        seqs = decode_seqs + (1 if prefill_tokens else 0)
        ranks = self.chips if self.attention_dp else 1
        t_overhead = hw.step_overhead_ms * 1e-3 + hw.seq_overhead_us * 1e-6 * seqs / ranks
        # host work hidden under the GPU's step (an overlap scheduler prepares step n + 1 while
        # step n runs): the step is max(GPU, host), a floor under the GPU's part
        t_host = hw.hidden_seq_us * 1e-6 * seqs / ranks
        t_floor = max(t_floor, t_host - t_comm - t_hops)

        roof = overlapped(t_weights, t_gemm, hw.roofline_overlap) + t_attn_dec + t_attn_pre
        core = max(roof, t_floor)
        memory_side = t_weights + kv_read_dec + kv_read_pre
        compute_side = t_gemm + attn_math_dec + attn_math_pre
        if t_floor > roof:
            bound = "latency"
        elif compute_side > memory_side:
            bound = "compute"
        else:
            bound = "memory"
        total = core + t_comm + t_hops + t_overhead
        return StepTime(
            total,
            bound,
            {
                "weights_s": t_weights,
                "compute_s": t_gemm,
                "attention_s": t_attn_dec + t_attn_pre,
                "kv_s": kv_read_dec + kv_read_pre,
                "layer_floor_s": t_floor,  # the layers' latency floor, or the hidden host's
                "comm_s": t_comm,
                "hops_s": t_hops,
                "overhead_s": t_overhead,
            },
        )

    def decode_line(
        self, decode_seqs: int, prefill_tokens: int = 0, prefill_context_tokens: float = 0.0
    ) -> tuple[float, float, float, float, float, float]:
        """``step`` as a function of the decode context alone, for a fixed batch.

        Returns (w, c0, c1, k1, t_floor, t_fixed) such that
        ``step(...).total_s == max(max(w, c0 + c1 * ctx) + k1 * ctx, t_floor) + t_fixed``.
        Attention is additive and linear in the context, so c1 = 0 and k1 is the per-token
        attention cost; w = c0 holds the weights/GEMM part and the prefill's attention. The
        virtual clock uses it to run long stretches of decode steps without rebuilding the
        breakdown each step.
        """
        base = self.step(decode_seqs, 0.0, prefill_tokens, prefill_context_tokens)
        b = base.breakdown
        if not b:
            return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        k1 = self._kv_seconds_per_token()
        w = overlapped(b["weights_s"], b["compute_s"], self.hardware.roofline_overlap)
        w += b["attention_s"]
        fixed = b["comm_s"] + b["hops_s"] + b["overhead_s"]
        return (w, w, 0.0, k1, b["layer_floor_s"], fixed)

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


def overlapped(a: float, b: float, overlap: float) -> float:
    """Two times that overlap by ``overlap`` of the shorter: max + (1 - overlap) * min."""
    return max(a, b) + (1.0 - overlap) * min(a, b)


def prefill_attention_context(chunk: int, already: int) -> float:
    """Sum over a chunk's tokens of the context each attends to (causal)."""
    return chunk * already + chunk * chunk / 2


__all__ = [
    "ACTIVATION_BYTES",
    "ATTENTION_PRECISION",
    "Placement",
    "StepTime",
    "overlapped",
    "prefill_attention_context",
    "touched_expert_share",
]
