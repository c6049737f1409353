"""Hardware and model profiles: plain data, loaded from TOML files shipped in ``fastmode/backends/data``.

Profiles are data, not code, so that users can add their own (``[hardware.NAME]`` and
``[models.NAME]`` tables in the config file) and so that every number can carry a comment saying
where it comes from. Units are in the field names: GB = 1e9 bytes, TB/s = 1e12 bytes/s,
TFLOP/s = 1e12 FLOP/s, B (params) = 1e9 parameters.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from importlib import resources
from typing import Any, Literal

Precision = Literal["bf16", "fp16", "fp8", "int8", "fp4", "mxfp4"]

# Bytes per parameter of each weight format. The 4-bit formats carry their block scales:
# NVFP4 ("fp4", "nvfp4") is 4-bit E2M1 values with one FP8 (E4M3) scale per 16 values, 4.5
# bits; MXFP4 (OCP microscaling, gpt-oss's experts) one 8-bit power-of-two scale per 32,
# 4.25 bits (NVIDIA "Introducing NVFP4" developer blog, 2025; the OCP MX v1.0 specification).
BYTES_PER_PARAM: dict[str, float] = {
    "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 4.5 / 8, "mxfp4": 4.25 / 8,
}
ALIASES = {"nvfp4": "fp4"}
FOUR_BIT = ("fp4", "mxfp4")


def canonical_precision(precision: str) -> str:
    """The precision's name in BYTES_PER_PARAM ("nvfp4" is "fp4")."""
    return ALIASES.get(precision, precision)


def compute_precision(precision: str) -> str:
    """The tensor-core rate a GEMM of weights at ``precision`` runs at: 8-bit weights on the
    8-bit rate, 4-bit ones on the fp4 rate where the chip has one (``HardwareProfile.
    peak_flops`` falls back to bf16 where it has none: W4A16 dequantising kernels, as
    gpt-oss's MXFP4 experts run on Hopper)."""
    precision = canonical_precision(precision)
    return "fp4" if precision in FOUR_BIT else precision


class ProfileError(ValueError):
    """A profile is missing, unknown or inconsistent. The message names the field."""


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator chip (a GPU, or one wafer-scale engine)."""

    name: str
    kind: Literal["gpu", "wafer"]
    memory_gb: float  # HBM per chip, or on-chip SRAM for a wafer
    memory_bandwidth_tbs: float  # peak memory bandwidth per chip
    tflops: dict[str, float]  # dense peak TFLOP/s per precision (no sparsity)
    interconnect_gbs: float  # chip-to-chip bandwidth per direction (NVLink, fabric)
    # tensor sharding: the fixed latency of one all-reduce (of a decode-sized message);
    # layer sharding: the latency of one activation hop from chip to chip
    interconnect_latency_us: float
    mbu: float  # achieved fraction of peak memory bandwidth reading weights in decode
    mfu: float  # achieved fraction of peak FLOP/s of large GEMMs (prefill, big batches)
    step_overhead_ms: float  # host-side work per engine step (scheduler, kernel launches)
    layer_latency_us: float  # floor per layer per step: no layer finishes faster than this
    price_per_hour_usd: float  # rental price of one chip
    sharding: Literal["tensor", "layer"] = "tensor"  # how a model is split across chips
    # achieved fraction of peak bandwidth of attention kernels reading the KV cache (paged
    # attention is less regular than a weight GEMM); None = the same as mbu
    mbu_kv: float | None = None
    # achieved fraction of the fp8/int8 peak by fp8/int8 GEMMs (they reach a smaller share of
    # their doubled peak than bf16 GEMMs do of theirs); None = the same as mfu
    mfu_fp8: float | None = None
    # the smallest token count a GEMM pays for: tensor-core GEMMs work on tiles of rows, so a
    # step of T tokens costs the FLOPs of max(T, gemm_min_tokens) (small matrices do not reach
    # peak); 0 = FLOPs of exactly T tokens
    gemm_min_tokens: float = 0.0
    # how much of the shorter of (weight reads, GEMM math) hides under the longer one in a
    # step: t = max(t_w, t_c) + (1 - roofline_overlap) * min(t_w, t_c); 1 = the plain
    # roofline's max (perfect overlap), 0 = no overlap at all (their sum)
    roofline_overlap: float = 1.0
    # fixed latency a served request pays before its first token besides the engine steps (API
    # server, tokenizer, scheduler admission, streaming the first chunk); not part of any step
    request_overhead_ms: float = 0.0
    # and per prompt token: the API server tokenizes the prompt's text before the engine sees
    # it (an engine term, docs/calibration.md "The harness of a figure"); 0 = none
    request_us_per_prompt_token: float = 0.0
    # host work per sequence of a step (scheduling, sampling, detokenising, bookkeeping in the
    # engine's Python loop), on top of step_overhead_ms; an engine term like it
    seq_overhead_us: float = 0.0
    # host work per sequence that an overlap scheduler runs under the GPU's step: the step is
    # at least this x sequences per attention-DP rank (an engine term, engines.toml); 0 = none
    hidden_seq_us: float = 0.0
    # achieved fraction of the fp4 peak by fp4 GEMMs; None = the same as mfu_fp8
    mfu_fp4: float | None = None
    # GEMM efficiency by size: a GEMM over T rows reaches mfu * T / (T + gemm_half_tokens) of
    # peak (a long prefill's GEMMs near mfu, a decode batch's far less: waves, tile and
    # pipeline fill); 0 = mfu at every size
    gemm_half_tokens: float = 0.0
    # prefill attention efficiency by attended length: a prompt chunk attending to L tokens on
    # average runs at mfu * L / (L + attention_half_tokens) (FlashAttention kernels reach less
    # of peak on short sequences); 0 = mfu at every length
    attention_half_tokens: float = 0.0
    # share of the weight-read efficiency mbu that routed-expert reads reach (grouped MoE GEMMs
    # over a few tokens per expert stream weights less regularly than a dense GEMM)
    expert_read_efficiency: float = 1.0
    # share of the GEMM rate that grouped expert GEMMs reach against a dense GEMM of the same
    # rows (routing, permutation of k copies of every token, ragged groups)
    expert_compute_efficiency: float = 1.0
    # spread of the router's expert popularity (squared coefficient of variation; 0 = uniform
    # routing): fewer distinct experts touched per step (fastmode/backends/expert_skew.py)
    expert_load_cv2: float = 0.0
    # the latency floor of a layer's kernels grows with their number: a mixture-of-experts
    # FFN adds its router, top-k, permutation and grouped GEMMs, multi-head latent attention
    # its low-rank projections and norms (a DeepSeek-V3 decode layer is 13 fused modules in
    # TensorRT-LLM's min-latency kernels, tech blog 1, against ~8 for a dense GQA layer)
    moe_layer_latency_us: float = 0.0
    mla_layer_latency_us: float = 0.0
    # share of the bf16 peak a GEMM of 4-bit weights reaches on a chip without 4-bit tensor
    # cores, where the kernel dequantises them to bf16 in its main loop (W4A16), at any size
    # (fastmode/backends/dequant.py: issue-bound on the dequantisation; 0.26 measured on H100)
    w4a16_efficiency: float = 0.26
    # chips joined by the scale-up fabric (NVLink / Infinity Fabric): 8 in an HGX / OAM board,
    # 72 in a GB200 / GB300 NVL72 rack; a tensor- or expert-parallel group beyond it talks over
    # the scale-out network (scale_out_gbs per chip and direction, scale_out_latency_us)
    # share of interconnect_gbs a tensor-parallel collective's bus bandwidth reaches: NCCL's
    # protocol overhead on NVLink (the all-reduce's latency is interconnect_latency_us); 1 = the
    # line rate
    allreduce_bus_share: float = 1.0
    scale_up_domain: int = 8
    scale_out_gbs: float = 50.0  # 400 Gb/s InfiniBand / RoCE NIC per GPU
    scale_out_latency_us: float = 60.0
    description: str = ""

    @property
    def kv_bandwidth_efficiency(self) -> float:
        return self.mbu if self.mbu_kv is None else self.mbu_kv

    def rate_precision(self, precision: str) -> str:
        """The row of ``tflops`` a GEMM of weights at ``precision`` runs on (see
        ``compute_precision``): int8 and fp8 stand in for each other, and a chip without the
        low-precision row runs the math in bf16."""
        p = compute_precision(precision)
        if canonical_precision(precision) == "mxfp4":
            # MXFP4 weights run W4A8 (MXFP4 x MXFP8) on chips with 4-bit tensor cores
            # (TensorRT-LLM's default on Blackwell, "Running gpt-oss-120b with TensorRT-LLM"),
            # W4A16 dequantising kernels elsewhere (Hopper)
            p = "fp8" if "fp4" in self.tflops else "bf16"
        for q in (p, {"int8": "fp8", "fp8": "int8"}.get(p, ""), "bf16"):
            if q in self.tflops:
                return q
        raise ProfileError(f"hardware {self.name!r} has no FLOP/s figure for {precision!r}")

    def gemm_efficiency(self, precision: str) -> float:
        """Peak share reached by large GEMMs at ``precision``: mfu, mfu_fp8 for 8-bit, mfu_fp4
        (else mfu_fp8) for 4-bit math, by the row the chip runs it on."""
        row = self.rate_precision(precision)
        fp8 = self.mfu if self.mfu_fp8 is None else self.mfu_fp8
        if row in ("fp8", "int8"):
            return fp8
        if row == "fp4":
            return fp8 if self.mfu_fp4 is None else self.mfu_fp4
        return self.mfu

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s of a GEMM of weights at ``precision`` (``rate_precision``'s row)."""
        return self.tflops[self.rate_precision(precision)] * 1e12


@dataclass(frozen=True)
class ModelProfile:
    """A transformer's shape: what the roofline needs to know about it."""

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context_window: int  # tokens
    total_params_b: float
    active_params_b: float  # parameters touched per token (== total for a dense model)
    experts: int = 0  # routed experts per MoE layer (0 = dense)
    experts_per_token: int = 0  # routed experts each token uses
    expert_params_b: float = 0.0  # parameters in all routed experts together
    kv_bytes_per_element: float | None = None  # None = same as weight precision
    # bytes per routed-expert parameter fixed whatever the deployment precision (kept for
    # configs written before 4-bit precisions existed); None = the deployment precision
    expert_bytes_per_param: float | None = None
    # the precision a plain ``--precision``-less placement uses: the released checkpoint's
    # (gpt-oss: "mxfp4" experts; DeepSeek-V3: "fp8")
    default_precision: str = "bf16"
    # parameters a quantized checkpoint keeps in 16 bits, embeddings included (Meta's FP8
    # Llama 3.1 405B keeps attention and the first and last layers in bf16; gpt-oss
    # quantizes only its experts); None = the embeddings alone (input table and LM head),
    # which every FP8 / FP4 checkpoint of the set keeps in 16 bits
    bf16_params_b: float | None = None
    # input embedding and LM head share one table (the LM head reads it every step)
    tied_embeddings: bool = False
    # q, k, v and o projections of all layers; None = computed from the shape (GQA)
    attention_params_b: float | None = None
    # multi-head latent attention (DeepSeek-V2/V3): the compressed KV latent's rank and the
    # per-head dims; decode runs the "absorbed" form (every head attends over the latent),
    # prefill the expanded one. 0 = ordinary (GQA / MHA) attention
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # multi-token-prediction modules the checkpoint ships (DeepSeek-V3: 1, "DeepSeek-V3
    # Technical Report" section 2.2): what ``--speculative mtp`` drafts with; 0 = none
    mtp_layers: int = 0
    description: str = ""

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def dense_params_b(self) -> float:
        """Parameters every token reads: attention, shared experts, embeddings."""
        return self.total_params_b - self.expert_params_b

    # -- parameters by layer type ---------------------------------------------------------

    @property
    def embedding_params_b(self) -> float:
        """Input embedding table and LM head (one table when tied)."""
        return self.vocab * self.d_model * (1 if self.tied_embeddings else 2) / 1e9

    @property
    def lm_head_params_b(self) -> float:
        return self.vocab * self.d_model / 1e9

    @property
    def input_embedding_params_b(self) -> float:
        """The input table, when it is not the LM head: a row lookup per token, never read
        whole by a step."""
        return 0.0 if self.tied_embeddings else self.vocab * self.d_model / 1e9

    @property
    def attention_params(self) -> float:
        """Attention projections of all layers, billions (explicit, or from the shape)."""
        if self.attention_params_b is not None:
            return self.attention_params_b
        qo = 2 * self.heads * self.head_dim * self.d_model
        kv = 2 * self.kv_heads * self.head_dim * self.d_model
        return self.layers * (qo + kv) / 1e9

    def kept_bf16_params_b(self, precision: str) -> float:
        """Parameters that stay 16-bit at ``precision`` (all of them at 16 bits)."""
        if bytes_per_param(precision) >= 2:
            return self.total_params_b
        kept = self.embedding_params_b if self.bf16_params_b is None else self.bf16_params_b
        return min(kept, self.dense_params_b)

    def expert_bytes_per_param_at(self, precision: str) -> float:
        """Bytes per routed-expert parameter at ``precision``."""
        if self.expert_bytes_per_param is not None:
            return self.expert_bytes_per_param
        return bytes_per_param(precision)

    def weight_bytes(self, precision: str) -> float:
        """Bytes of the checkpoint at ``precision`` (what sits in memory)."""
        return self.weight_bytes_touched(precision, 1.0)

    def weight_bytes_touched(self, precision: str, expert_share: float) -> float:
        """Bytes of the dense part (its 16-bit layers at 2 bytes, the rest at the precision)
        plus ``expert_share`` of the routed experts."""
        bpp = bytes_per_param(precision)
        kept = self.kept_bf16_params_b(precision) if bpp < 2 else 0.0
        dense = kept * 2.0 + max(0.0, self.dense_params_b - kept) * bpp
        return (dense + self.expert_params_b * expert_share * self.expert_bytes_per_param_at(precision)) * 1e9

    def embedding_bytes_per_param(self, precision: str) -> float:
        bpp = bytes_per_param(precision)
        if bpp >= 2:
            return bpp
        return 2.0 if self.kept_bf16_params_b(precision) >= self.embedding_params_b else bpp

    def read_bytes(self, precision: str, expert_share: float) -> float:
        """Bytes one step reads: the checkpoint's touched bytes but the input embedding
        table (a lookup of the step's rows)."""
        skip = self.input_embedding_params_b * self.embedding_bytes_per_param(precision)
        return self.weight_bytes_touched(precision, expert_share) - skip * 1e9

    def gemm_params_b(self, precision: str) -> tuple[float, float, float]:
        """Parameters each token multiplies by, split by the rate they run at: (quantized
        body, 16-bit body, experts per token). The LM head and the input embedding are not
        in it (the LM head runs only for the tokens that sample: ``lm_head_params_b``)."""
        body = max(0.0, self.dense_params_b - self.embedding_params_b)
        kept = self.kept_bf16_params_b(precision)
        bf16_body = body if bytes_per_param(precision) >= 2 else min(
            body, max(0.0, kept - self.embedding_params_b))
        experts = self.expert_params_b * self.experts_per_token / self.experts if self.is_moe \
            else 0.0
        return body - bf16_body, bf16_body, experts

    @property
    def params_per_expert_b(self) -> float:
        """One routed expert of all layers, billions."""
        return self.expert_params_b / self.experts if self.is_moe else 0.0

    def attention_flops_per_context_token(self, decode: bool = True) -> float:
        """FLOPs of one query token per token of attended context, all layers: QK^T and
        attention x V at 2 FLOPs per multiply-add. MLA decodes over its latent (rank + rope
        dims for scores, rank for values, every head); it prefills expanded heads."""
        if self.is_mla:
            if decode:
                per_head = 2 * (self.kv_lora_rank + self.qk_rope_head_dim) + 2 * self.kv_lora_rank
            else:
                per_head = 2 * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
            return float(self.layers * self.heads * per_head)
        return 4.0 * self.layers * self.heads * self.head_dim

    def kv_bytes_per_token(self, precision: str, kv_precision: str | None = None) -> float:
        """K and V for one token of context, all layers (MLA: its one latent per layer).

        ``kv_precision`` (a precision name) sets the cache's element size; without it the
        model's ``kv_bytes_per_element`` applies, else the weight precision's (16-bit for a
        4-bit checkpoint: no engine keeps a 4-bit KV cache).
        """
        if kv_precision is not None:
            elem = bytes_per_param(kv_precision)
        else:
            elem = self.kv_bytes_per_element or max(1.0, bytes_per_param(precision))
            if canonical_precision(precision) in FOUR_BIT and not self.kv_bytes_per_element:
                elem = 2.0
        return 2 * self.layers * self.kv_heads * self.head_dim * elem


def bytes_per_param(precision: str) -> float:
    try:
        return BYTES_PER_PARAM[canonical_precision(precision)]
    except KeyError:
        raise ProfileError(
            f"precision: unknown {precision!r}; allowed: {', '.join(sorted(BYTES_PER_PARAM))}"
        ) from None


def _build(cls: type, name: str, raw: dict[str, Any]) -> Any:
    allowed = {f.name for f in fields(cls)} - {"name"}
    unknown = set(raw) - allowed
    if unknown:
        raise ProfileError(f"{cls.__name__} {name!r}: unknown field(s) {sorted(unknown)}")
    try:
        obj = cls(name=name, **raw)
    except TypeError as exc:  # a missing required field
        raise ProfileError(f"{cls.__name__} {name!r}: {exc}") from None
    if isinstance(obj, ModelProfile):
        bytes_per_param(obj.default_precision)  # a known precision name
    for f in fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, int | float) and not isinstance(v, bool) and v < 0:
            raise ProfileError(f"{cls.__name__} {name!r}: {f.name} must be >= 0, got {v}")
    if isinstance(obj, HardwareProfile) and not obj.allreduce_bus_share > 0:
        raise ProfileError(f"hardware {name!r}: allreduce_bus_share must be > 0")
    return obj


def _load_table(filename: str) -> dict[str, dict[str, Any]]:
    text = resources.files("fastmode.backends.data").joinpath(filename).read_text("utf-8")
    return tomllib.loads(text)


@dataclass
class Catalog:
    """All known hardware and models: the shipped profiles plus the user's additions."""

    hardware: dict[str, HardwareProfile] = field(default_factory=dict)
    models: dict[str, ModelProfile] = field(default_factory=dict)

    @classmethod
    def builtin(cls) -> Catalog:
        return cls().extend(_load_table("hardware.toml"), _load_table("models.toml"))

    def extend(
        self, hardware: dict[str, dict[str, Any]] | None, models: dict[str, dict[str, Any]] | None
    ) -> Catalog:
        hw = dict(self.hardware)
        md = dict(self.models)
        for name, raw in (hardware or {}).items():
            hw[name] = _build(HardwareProfile, name, dict(raw))
        for name, raw in (models or {}).items():
            md[name] = _build(ModelProfile, name, dict(raw))
        return Catalog(hw, md)

    def get_hardware(self, name: str) -> HardwareProfile:
        try:
            return self.hardware[name]
        except KeyError:
            raise ProfileError(
                f"hardware: unknown {name!r}; allowed: {', '.join(sorted(self.hardware))}"
            ) from None

    def get_model(self, name: str) -> ModelProfile:
        try:
            return self.models[name]
        except KeyError:
            raise ProfileError(
                f"model: unknown {name!r}; allowed: {', '.join(sorted(self.models))}"
            ) from None
