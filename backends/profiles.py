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
    interconnect_latency_us: float  # alpha: fixed latency per collective step / hop
    mbu: float  # achieved fraction of peak memory bandwidth in decode
    mfu: float  # achieved fraction of peak FLOP/s in prefill and large batches
    step_overhead_ms: float  # host-side work per engine step (scheduler, kernel launches)
    layer_latency_us: float  # floor per layer per step: no layer finishes faster than this
    price_per_hour_usd: float  # rental price of one chip
    sharding: Literal["tensor", "layer"] = "tensor"  # how a model is split across chips
    description: str = ""

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
    description: str = ""

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def dense_params_b(self) -> float:
        """Parameters every token reads: attention, shared experts, embeddings."""
        return self.total_params_b - self.expert_params_b

    def weight_bytes(self, precision: str) -> float:
        return self.total_params_b * 1e9 * bytes_per_param(precision)

    def kv_bytes_per_token(self, precision: str) -> float:
        """K and V for one token of context, all layers."""
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
