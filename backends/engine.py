"""From configuration to runnable pieces: placements, schedulers, tiers with their prices.

This is where the validated config meets the physics; drivers and the gateway take ``Tier`` and
``DeploymentSpec`` objects from here and never read the config themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import SimConfig
from .mockmodel import QualityProfile, ScriptRule
from .perf import Placement
from .pricing import Prices, hardware_cost_per_token
from .profiles import Catalog
from .scheduler import Background, Limits, Scheduler


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    placement: Placement
    limits: Limits
    background: Background
    replicas: int

    def new_scheduler(self) -> Scheduler:
        return Scheduler(self.placement, self.limits, self.background)

    @property
    def cost_per_token(self) -> float:
        return hardware_cost_per_token(self.placement, self.background)


@dataclass(frozen=True)
class Tier:
    name: str
    deployment: DeploymentSpec
    prices: Prices
    quality: QualityProfile
    derived_price_factor: float | None = None  # set when prices came from hardware cost
    description: str = ""

    @property
    def model(self) -> str:
        return self.deployment.placement.model.name

    @property
    def context_window(self) -> int:
        return self.deployment.placement.model.context_window


@dataclass(frozen=True)
class EngineSpec:
    catalog: Catalog
    deployments: dict[str, DeploymentSpec]
    tiers: dict[str, Tier]
    scripts: tuple[ScriptRule, ...] = field(default_factory=tuple)


def build(config: SimConfig, catalog: Catalog | None = None) -> EngineSpec:
    """Validate the physics of a config (every model fits its chips) and build its pieces.

    Raises ``ProfileError`` or ``ValueError`` with a message naming the field.
    """
    catalog = (catalog or Catalog.builtin()).extend(config.hardware, config.models)
    deployments: dict[str, DeploymentSpec] = {}
    for name, d in config.deployments.items():
        placement = Placement(
            catalog.get_model(d.model),
            catalog.get_hardware(d.hardware),
            d.chips,
            d.precision,
            d.memory_utilization,
        )
        background = Background(
            d.background_seqs, d.background.context_tokens, d.background.prefill_tokens_per_step
        )
        limits = Limits(d.max_batch, d.max_batched_tokens, d.max_waiting)
        spec = DeploymentSpec(name, placement, limits, background, d.replicas)
        try:
            spec.new_scheduler()
        except ValueError as exc:
            raise ValueError(f"deployments.{name}.{exc}") from None
        deployments[name] = spec

    ref_name = config.pricing.reference_tier
    ref_cfg = config.tiers[ref_name]
    assert ref_cfg.prices is not None  # checked by SimConfig
    ref_prices = Prices(**ref_cfg.prices.model_dump())
    ref_cost = deployments[ref_cfg.deployment].cost_per_token
    tiers: dict[str, Tier] = {}
    for name, t in config.tiers.items():
        dep = deployments[t.deployment]
        factor = None
        if t.prices is not None:
            prices = Prices(**t.prices.model_dump())
        else:
            factor = dep.cost_per_token / ref_cost
            prices = ref_prices.scaled(factor)
        kinds = {str(kind): weight for kind, weight in t.quality.error_kinds.items()}
        quality = QualityProfile(t.quality.tool_error_rate, kinds)
        tiers[name] = Tier(name, dep, prices, quality, factor, t.description)
    scripts = tuple(
        ScriptRule(s.match, s.reply, s.tool_name, s.tool_arguments) for s in config.scripts
    )
    return EngineSpec(catalog, deployments, tiers, scripts)
