"""The simulation part of the configuration: deployments, tiers, prices, quality, scripts.

Validated by pydantic at the edge; everything inside the simulator works on the dataclasses
these build (``Placement``, ``Limits``, ``Background``). The gateway's config extends this
schema with its own sections, and the whole lives in one TOML file (see the default one,
``gateway/data/default.toml``, which documents every knob with its unit and source).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BackgroundConfig(Strict):
    occupancy: float = Field(0.0, ge=0, lt=1, description="share of max_batch other tenants hold")
    context_tokens: int = Field(0, ge=0, description="mean context of their sequences, tokens")
    prefill_tokens_per_step: int = Field(
        0, ge=0, description="their prompt tokens riding along in every step"
    )


class DeploymentConfig(Strict):
    model: str
    hardware: str
    chips: int = Field(gt=0)
    precision: Literal["bf16", "fp8", "int8"] = "bf16"
    replicas: int = Field(1, gt=0)
    memory_utilization: float = Field(0.9, gt=0, le=1)
    max_batch: int = Field(256, gt=0)
    max_batched_tokens: int = Field(8192, gt=0)
    max_waiting: int = Field(1024, ge=0)
    background: BackgroundConfig = BackgroundConfig()

    @property
    def background_seqs(self) -> int:
        return int(round(self.background.occupancy * self.max_batch))


class PriceConfig(Strict):
    """USD per million tokens."""

    input: float = Field(ge=0)
    cached_input: float = Field(ge=0)
    output: float = Field(ge=0)


BotchKind = Literal["malformed_json", "unknown_tool", "missing_required", "invented_argument"]


def _every_botch_kind() -> dict[BotchKind, float]:
    return {
        "malformed_json": 1.0,
        "unknown_tool": 1.0,
        "missing_required": 1.0,
        "invented_argument": 1.0,
    }


class QualityConfig(Strict):
    tool_error_rate: float = Field(0.0, ge=0, le=1)
    error_kinds: dict[BotchKind, float] = Field(default_factory=_every_botch_kind)


class TierConfig(Strict):
    deployment: str
    prices: PriceConfig | None = None  # None: derived from hardware cost per token
    quality: QualityConfig = QualityConfig()
    description: str = ""


class ScriptConfig(Strict):
    match: str
    reply: str | None = None
    tool_name: str | None = None
    tool_arguments: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_action(self) -> ScriptConfig:
        if (self.reply is None) == (self.tool_name is None):
            raise ValueError("a script needs exactly one of reply or tool_name")
        return self


class PricingConfig(Strict):
    reference_tier: str = "standard"  # the tier whose prices are given; others derive from it


class SimConfig(Strict):
    hardware: dict[str, dict[str, Any]] = Field(default_factory=dict)  # extra hardware profiles
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)  # extra model profiles
    deployments: dict[str, DeploymentConfig]
    tiers: dict[str, TierConfig]
    pricing: PricingConfig = PricingConfig()
    scripts: list[ScriptConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> SimConfig:
        for name, tier in self.tiers.items():
            if tier.deployment not in self.deployments:
                raise ValueError(
                    f"tiers.{name}.deployment: unknown {tier.deployment!r}; "
                    f"allowed: {', '.join(sorted(self.deployments))}"
                )
        ref = self.pricing.reference_tier
        if ref not in self.tiers:
            raise ValueError(f"pricing.reference_tier: unknown tier {ref!r}")
        if self.tiers[ref].prices is None:
            raise ValueError(f"tiers.{ref}.prices: the reference tier must have prices")
        return self
