"""Hardware and model profiles: plain data, loaded from TOML files shipped in ``backends/data``.

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

Precision = Literal["bf16", "fp8", "int8"]

BYTES_PER_PARAM: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}


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
    description: str = ""

    @property
    def kv_bandwidth_efficiency(self) -> float:
        return self.mbu if self.mbu_kv is None else self.mbu_kv

    def gemm_efficiency(self, precision: str) -> float:
        """Peak share reached by large GEMMs at ``precision`` (mfu, or mfu_fp8 for 8-bit)."""
        if precision in ("fp8", "int8") and self.mfu_fp8 is not None:
            return self.mfu_fp8
        return self.mfu

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s at ``precision``; int8 falls back to fp8 rates and vice versa."""
        for p in (precision, {"int8": "fp8", "fp8": "int8"}.get(precision, ""), "bf16"):
            if p in self.tflops:
                return self.tflops[p] * 1e12
        raise ProfileError(f"hardware {self.name!r} has no FLOP/s figure for {precision!r}")


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
    # bytes per routed-expert parameter when the released checkpoint fixes it whatever the
    # deployment precision (gpt-oss ships its experts in MXFP4: 4.25 bits); None = precision
    expert_bytes_per_param: float | None = None
    description: str = ""

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def dense_params_b(self) -> float:
        """Parameters every token reads: attention, shared experts, embeddings."""
        return self.total_params_b - self.expert_params_b

    def weight_bytes(self, precision: str) -> float:
        return self.weight_bytes_touched(precision, 1.0)

    def weight_bytes_touched(self, precision: str, expert_share: float) -> float:
        """Bytes of the dense part plus ``expert_share`` of the routed experts."""
        bpp = bytes_per_param(precision)
        ebpp = bpp if self.expert_bytes_per_param is None else self.expert_bytes_per_param
        return (self.dense_params_b * bpp + self.expert_params_b * expert_share * ebpp) * 1e9

    def kv_bytes_per_token(self, precision: str, kv_precision: str | None = None) -> float:
        """K and V for one token of context, all layers.

        ``kv_precision`` (a precision name) sets the cache's element size; without it the
        model's ``kv_bytes_per_element`` applies, else the weight precision's.
        """
        if kv_precision is not None:
            elem = bytes_per_param(kv_precision)
        else:
            elem = self.kv_bytes_per_element or bytes_per_param(precision)
        return 2 * self.layers * self.kv_heads * self.head_dim * elem


def bytes_per_param(precision: str) -> float:
    try:
        return BYTES_PER_PARAM[precision]
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
    for f in fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, int | float) and not isinstance(v, bool) and v < 0:
            raise ProfileError(f"{cls.__name__} {name!r}: {f.name} must be >= 0, got {v}")
    return obj


def _load_table(filename: str) -> dict[str, dict[str, Any]]:
    text = resources.files("backends.data").joinpath(filename).read_text("utf-8")
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
