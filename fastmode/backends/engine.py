"""From configuration to runnable pieces: placements, schedulers, tiers with their prices.

This is where the validated config meets the physics; drivers and the gateway take ``Tier`` and
``DeploymentSpec`` objects from here and never read the config themselves. The other tenants'
demand is solved for its mean load here (``tenants.equilibrium``: what a lone user's speed and
the derived prices are computed against), and the fleet the deployments share is built here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from fastmode.backends.background import Background
from fastmode.backends.block_hash import BlockHasher
from fastmode.backends.calibrate.engines import REFERENCE_ENGINE, load_engines
from fastmode.backends.config import BehaviorConfig, DeploymentConfig, SimConfig
from fastmode.backends.config_vllm import KVTransferConfig
from fastmode.backends.disagg import DisaggregatedScheduler
from fastmode.backends.fleet import FleetSpec, build_fleet
from fastmode.backends.lora import LoraModule, LoraSlots, LoraSpec
from fastmode.backends.mockmodel import (
    DEFAULT_BEHAVIOR,
    ModelBehavior,
    QualityProfile,
    ReplyLengths,
    ScriptRule,
)
from fastmode.backends.perf import Placement
from fastmode.backends.prefix_cache import CacheRouting
from fastmode.backends.pricing import Prices, hardware_cost_per_token
from fastmode.backends.profiles import Catalog, HardwareProfile
from fastmode.backends.reasoning import DEFAULT_MEDIANS, DEFAULT_TASK_SCALE, ReasoningProfile
from fastmode.backends.scheduler import Limits, Scheduler
from fastmode.backends.speculative import mtp_draft, speculative_placement
from fastmode.backends.tenants import TenantDemand, TenantInput, equilibrium


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    placement: Placement
    limits: Limits
    background: Background
    replicas: int
    routing: CacheRouting = CacheRouting()  # how a request picks a replica
    tenants: TenantDemand | None = None  # the other tenants as demand (background: their mean)
    prefill: Placement | None = None  # disaggregated: each replica's prefill replica
    kv_blocks: BlockHasher | None = None  # the prefix cache in vLLM's blocks (backends.block_hash)
    lora: LoraSpec | None = None  # LoRA adapters served on the model (backends.lora)
    kv_transfer: KVTransferConfig | None = None  # a KV connector: P/D across engines

    def new_scheduler(self) -> Scheduler:
        if self.prefill is not None:
            sched: Scheduler = DisaggregatedScheduler(self.placement, self.limits,
                                                      self.background, self.prefill)
        else:
            sched = Scheduler(self.placement, self.limits, self.background)
        if self.lora is not None:
            sched.lora = LoraSlots(self.lora, self.placement)
        return sched

    @property
    def cost_per_token(self) -> float:
        extra = self.prefill.chips if self.prefill is not None else 0
        return hardware_cost_per_token(self.placement, self.background, extra)


@dataclass(frozen=True)
class Tier:
    name: str
    deployment: DeploymentSpec
    prices: Prices
    quality: QualityProfile
    derived_price_factor: float | None = None  # set when prices came from hardware cost
    description: str = ""
    behavior: ModelBehavior = DEFAULT_BEHAVIOR  # what its model does ([behavior.MODEL])
    priority: int = 0  # a shared pool admits higher priorities first
    stream_interval: int = 1  # tokens per streamed event (the last event has the remainder)

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
    fleet: FleetSpec | None = None  # None: no fleet and no tenant dynamics (a bare engine)

    @cached_property
    def max_context_window(self) -> int:
        """The largest context window of any tier: no longer prompt can be served (read
        on every request, worked out once: the spec is a value)."""
        return max((t.context_window for t in self.tiers.values()), default=0)


def _reference_reserve(hardware: HardwareProfile) -> float:
    """The reference engine's memory reserve per chip (fastmode/backends/data/engines.toml) on a GPU;
    none on a wafer, whose dataflow runtime captures no CUDA graphs and keeps no NCCL or
    cuBLAS workspaces (what the GPU engines' reserve is made of)."""
    if hardware.kind != "gpu":
        return 0.0
    engines = load_engines()
    ref = engines.get(REFERENCE_ENGINE)
    return ref.reserved_gb if ref is not None else 0.0


def build(config: SimConfig, catalog: Catalog | None = None) -> EngineSpec:
    """Validate the physics of a config (every model fits its chips) and build its pieces.

    Raises ``ProfileError`` or ``ValueError`` with a message naming the field.
    """
    catalog = (catalog or Catalog.builtin()).extend(config.hardware, config.models)
    deployments: dict[str, DeploymentSpec] = {}
    for name, d in config.deployments.items():
        hw = catalog.get_hardware(d.hardware)
        # memory as the reference engine (vLLM, what `fastmode serve` imitates) accounts it:
        # activations of a forward pass at the step budget and its own reserve per chip
        placement = Placement(
            catalog.get_model(d.model),
            hw,
            d.chips,
            d.precision,
            d.memory_utilization,
            activation_tokens=d.max_batched_tokens,
            reserved_gb=_reference_reserve(hw),
            attention_dp=d.attention_dp,
            cuda_graph_gb=d.cuda_graph_memory_gb,
            kv_cache_gb=(None if d.kv_cache_memory_bytes is None
                         else d.kv_cache_memory_bytes / 1e9),
        )
        if d.speculative is not None:
            sp = d.speculative
            draft = (mtp_draft(placement.model) if sp.draft_model == "mtp"
                     else catalog.get_model(sp.draft_model))
            placement = speculative_placement(
                placement, draft, sp.draft_chips, sp.draft_tokens, sp.acceptance,
            )
        prefill = None
        if d.prefill_chips is not None:
            prefill = Placement(placement.model, placement.hardware, d.prefill_chips,
                                d.precision, d.memory_utilization,
                                activation_tokens=d.max_batched_tokens,
                                reserved_gb=_reference_reserve(hw),
                                attention_dp=d.attention_dp)
        background = Background(
            d.background_seqs, d.background.context_tokens, d.background.prefill_tokens_per_step
        )
        limits = Limits(d.max_batch, d.max_batched_tokens, d.max_waiting, d.prefix_caching,
                        d.block_size)
        routing = CacheRouting(d.prefix_caching and d.prefix_routing, d.prefix_routing_max_imbalance)
        demand = _tenants(config, name, d, placement, limits)
        if demand is not None:
            background = demand.background
        blocks = (BlockHasher(d.block_size, d.prefix_caching_hash_algo,
                              d.prefix_caching_hash_seed)
                  if d.prefix_caching and d.prefix_cache_blocks else None)
        lora = None
        if d.lora is not None and d.lora.enable_lora:
            lora = LoraSpec(d.lora.max_loras, d.lora.max_lora_rank,
                            tuple(LoraModule(m.name, m.path, m.rank, m.base_model_name)
                                  for m in d.lora.modules), d.lora.runtime_updating)
        kv = d.kv_transfer if d.kv_transfer is not None and d.kv_transfer.on else None
        spec = DeploymentSpec(name, placement, limits, background, d.replicas, routing, demand,
                              prefill, blocks, lora, kv)
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
        elif t.price_factor is not None:  # a set multiple of the reference (e.g. fast at 2x)
            prices = ref_prices.scaled(t.price_factor)
        else:
            factor = dep.cost_per_token / ref_cost
            prices = ref_prices.scaled(factor)
        kinds = {str(kind): weight for kind, weight in t.quality.error_kinds.items()}
        quality = QualityProfile(t.quality.tool_error_rate, kinds,
                                 t.quality.structured_error_rate)
        model_cfg = config.behavior.get(config.deployments[t.deployment].model)
        behavior = model_behavior(model_cfg) if model_cfg is not None else DEFAULT_BEHAVIOR
        tiers[name] = Tier(name, dep, prices, quality, factor, t.description, behavior,
                           stream_interval=t.stream_interval)
    tiers = {n: replace(t, priority=config.tiers[n].priority) for n, t in tiers.items()}
    scripts = tuple(
        ScriptRule(s.match, s.reply, s.tool_name, s.tool_arguments) for s in config.scripts
    )
    fleet = build_fleet(
        config.fleet,
        {n: (config.deployments[n], spec) for n, spec in deployments.items()},
        {n: spec.tenants for n, spec in deployments.items() if spec.tenants is not None},
        {h: catalog.get_hardware(h).price_per_hour_usd
         for h in {d.hardware for d in config.deployments.values()}},
    )
    return EngineSpec(catalog, deployments, tiers, scripts, fleet)


def _tenants(
    config: SimConfig, name: str, d: DeploymentConfig, placement: Placement, limits: Limits
) -> TenantDemand | None:
    """The other tenants of the tiers on deployment ``name``, solved for their mean load."""
    inputs = [
        TenantInput(tname, t.tenants.prompt_tokens, t.tenants.output_tokens, t.tenants.rate,
                    t.tenants.occupancy, t.priority, t.tenants.cached_tokens)
        for tname, t in config.tiers.items()
        if t.deployment == name and t.tenants is not None
    ]
    if not inputs:
        return None
    tick = config.fleet.tenant_tick_s if config.fleet is not None else 2.0
    return equilibrium(placement, limits, inputs, d.replicas, tick)


def model_behavior(cfg: BehaviorConfig) -> ModelBehavior:
    """A ``[behavior.MODEL]`` table as the mock model's ``ModelBehavior``."""
    reasoning = ReasoningProfile(
        enabled=cfg.reasoning,
        default_effort=cfg.default_effort,
        median_tokens={**DEFAULT_MEDIANS,
                       **{str(k): v for k, v in cfg.reasoning_tokens.items()}},
        sigma=cfg.reasoning_sigma,
        budget_use=cfg.thinking_budget_use,
        task_scale={**DEFAULT_TASK_SCALE,
                    **{str(k): v for k, v in cfg.reasoning_task_scale.items()}},
    )
    defaults = ReplyLengths()
    replies = ReplyLengths(
        median_tokens={**defaults.median_tokens,
                       **{str(k): v for k, v in cfg.reply_tokens.items()}},
        sigma=cfg.reply_sigma,
        max_tokens=cfg.reply_max_tokens,
    )
    return ModelBehavior(reasoning, replies, cfg.parallel_tool_share, cfg.max_parallel_tools,
                         cfg.raw_reasoning)
