"""The simulation part of the configuration: deployments, tiers, prices, quality, scripts,
the other tenants' demand and the fleet the deployments draw their replicas from.

Validated by pydantic at the edge; everything inside the simulator works on the dataclasses
these build (``Placement``, ``Limits``, ``Background``, ``TenantDemand``, ``FleetSpec``). The
gateway's config extends this schema with its own sections, and the whole lives in one TOML file
(see the default one, ``fastmode/gateway/data/default.toml``, which documents every knob with its unit
and source).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fastmode.backends.config_vllm import KVTransferConfig, LoraConfig


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BackgroundConfig(Strict):
    occupancy: float = Field(0.0, ge=0, lt=1, description="share of max_batch other tenants hold")
    context_tokens: int = Field(0, ge=0, description="mean context of their sequences, tokens")
    prefill_tokens_per_step: int = Field(
        0, ge=0, description="their prompt tokens riding along in every step"
    )


class SpeculativeConfig(Strict):
    """Speculative decoding: a draft model proposes ``draft_tokens`` tokens, the target verifies
    them in one step and keeps the accepted prefix plus one token of its own. ``draft_model``
    "mtp" drafts with the model's own multi-token-prediction layer (DeepSeek-V3)."""

    draft_model: str
    draft_tokens: int = Field(4, ge=1, le=16, description="tokens drafted per step (k)")
    acceptance: float = Field(0.7, gt=0, lt=1, description="per-token acceptance rate (alpha)")
    draft_chips: int = Field(1, gt=0, description="chips the draft runs on (of the replica's)")


class KVEventsConfig(Strict):
    """vLLM's ``--kv-events-config`` (its KVEventsConfig fields and defaults)."""

    enable_kv_cache_events: bool = False
    publisher: Literal["null", "zmq"] = "null"
    endpoint: str = "tcp://*:5557"  # PUB socket; replica i of a process binds port + i
    replay_endpoint: str | None = None  # ROUTER socket serving missed batches (port + i too)
    buffer_steps: int = Field(10_000, ge=1)  # batches kept for replay
    hwm: int = Field(100_000, ge=0)  # ZMQ send high-water mark
    max_queue_size: int = Field(100_000, ge=1)  # accepted, as vLLM's (batches are sent at once)
    topic: str = ""

    @property
    def on(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"


class DeploymentConfig(Strict):
    model: str
    hardware: str
    chips: int = Field(gt=0)
    precision: Literal["bf16", "fp16", "fp8", "int8", "fp4", "nvfp4", "mxfp4"] = "bf16"
    replicas: int = Field(1, gt=0)  # at start; a proportional fleet moves them between pools
    min_replicas: int = Field(1, ge=1)  # the autoscaler never goes below (proportional fleets)
    max_replicas: int | None = Field(None, ge=1)  # ... nor above (None: what the fleet holds)
    memory_utilization: float = Field(0.9, gt=0, le=1)
    # KV memory beside the rule (fastmode/backends/memory.py): CUDA graph memory per GPU, GB,
    # counted against the KV cache (0: vLLM's default, which captures its graphs after sizing
    # the KV cache; with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the start-up log's "GiB
    # for CUDAGraph memory", 1 GiB = 1.074 GB), and the KV cache per GPU in bytes given
    # outright (vLLM's --kv-cache-memory-bytes; None: sized by memory_utilization)
    cuda_graph_memory_gb: float = Field(0.0, ge=0)
    kv_cache_memory_bytes: int | None = Field(None, gt=0)
    max_batch: int = Field(256, gt=0)
    max_batched_tokens: int = Field(8192, gt=0)
    max_waiting: int = Field(1024, ge=0)
    prefix_caching: bool = True  # each replica keeps computed prompt prefixes (backends.prefix_cache)
    prefix_routing: bool = True  # send a request to the replica holding its prefix...
    prefix_routing_max_imbalance: int = Field(16, ge=0)  # ...unless it has this many more queued
    # the prefix cache in vLLM's blocks (backends.block_hash): on for `fastmode engine`, off
    # for the gateway (its cache follows the providers' 1,024 / 128-token steps)
    prefix_cache_blocks: bool = False
    block_size: int = Field(16, ge=1, le=1024)  # tokens per block (vLLM's --block-size, 16)
    prefix_caching_hash_algo: Literal["sha256", "sha256_cbor"] = "sha256"  # vLLM's default
    prefix_caching_hash_seed: str = "0"  # NONE_HASH = hash(seed) (vLLM: PYTHONHASHSEED)
    kv_events: KVEventsConfig | None = None  # KV-cache events (gateway.observe.kv_events)
    lora: LoraConfig | None = None  # LoRA adapters (vLLM's --enable-lora; backends.lora)
    kv_transfer: KVTransferConfig | None = None  # vLLM's --kv-transfer-config (P/D engines)
    background: BackgroundConfig = BackgroundConfig()
    speculative: SpeculativeConfig | None = None
    # prefill/decode disaggregation: each replica pairs its decode chips with a prefill replica
    # of this many chips of the same hardware (fastmode/backends/disagg.py); None: prompts ride along
    prefill_chips: int | None = Field(None, gt=0)
    # attention data parallelism: each chip runs whole sequences' attention and keeps only
    # their KV, the FFNs stay tensor parallel (a group wider than the KV heads would otherwise
    # store every KV head on several chips: docs/performance-model.md, "Parallelism")
    attention_dp: bool = False

    @property
    def replica_chips(self) -> int:
        """Chips one replica takes from the fleet (its prefill replica's included)."""
        return self.chips + (self.prefill_chips or 0)

    @property
    def background_seqs(self) -> int:
        return int(round(self.background.occupancy * self.max_batch))

    @property
    def has_background(self) -> bool:
        return self.background != BackgroundConfig()


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
    structured_error_rate: float = Field(0.0, ge=0, le=1)  # botched structured outputs


class TenantsConfig(Strict):
    """The other tenants of a tier as demand: their arrival rate and request lengths.

    Give ``rate`` (requests/s across the tier's pool), or ``occupancy`` (the mean share of the
    pool's batch slots they hold on its starting replicas; the rate is derived from it).
    """

    rate: float | None = Field(None, gt=0)
    occupancy: float | None = Field(None, gt=0, lt=1)
    prompt_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    # of their prompt, tokens found in the prefix cache (a continued conversation, an agent's
    # growing context): attended to, not prefilled, billed at the cached price
    cached_tokens: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _one_load(self) -> TenantsConfig:
        if (self.rate is None) == (self.occupancy is None):
            raise ValueError("give exactly one of rate or occupancy")
        if self.cached_tokens > self.prompt_tokens:
            raise ValueError("cached_tokens must be <= prompt_tokens")
        return self


class TierConfig(Strict):
    deployment: str
    prices: PriceConfig | None = None  # None: derived from hardware cost per token
    price_factor: float | None = Field(None, gt=0)  # or: the reference tier's prices times this
    quality: QualityConfig = QualityConfig()
    description: str = ""
    priority: int = Field(0, ge=0, le=9)  # a shared pool admits higher priorities first
    tenants: TenantsConfig | None = None  # the other tenants of this tier, as demand
    # tokens per streamed event (vLLM's --stream-interval); the last event has the remainder
    stream_interval: int = Field(1, ge=1, le=4096)


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


Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
ReplyKind = Literal["greeting", "short", "normal", "long"]
TaskKind = Literal["greeting", "short", "normal", "long", "hard", "step"]


class BehaviorConfig(Strict):
    """``[behavior.MODEL]``: what the mock model does for a model (backends.mockmodel.behavior):
    whether it reasons and how long, how long its replies are, how often it calls tools in
    parallel. Missing entries of the two tables keep their defaults."""

    reasoning: bool = False  # a reasoning model: effort / thinking requests are accepted
    default_effort: Effort = "none"  # effort of a request that names none (OpenAI protocols)
    reasoning_tokens: dict[Effort, int] = Field(default_factory=dict)  # median per effort
    reasoning_sigma: float = Field(0.5, ge=0, le=2)  # ln-space spread of reasoning lengths
    thinking_budget_use: float = Field(0.6, gt=0, le=1)  # share of budget_tokens used (median)
    # reasoning per kind of task, a multiple of the effort's median (backends.reasoning)
    reasoning_task_scale: dict[TaskKind, float] = Field(default_factory=dict)
    reply_tokens: dict[ReplyKind, int] = Field(default_factory=dict)  # median per request kind
    reply_sigma: float = Field(0.6, ge=0, le=2)
    reply_max_tokens: int = Field(6000, ge=1)
    parallel_tool_share: float = Field(0.25, ge=0, le=1)
    max_parallel_tools: int = Field(3, ge=1, le=16)
    # the reasoning text itself on the OpenAI protocols (vLLM / gpt-oss: Chat ``reasoning``,
    # Responses ``reasoning_text`` parts); false: hidden, as OpenAI's hosted models keep it
    raw_reasoning: bool = False

    @model_validator(mode="after")
    def _positive(self) -> BehaviorConfig:
        for table in ("reasoning_tokens", "reply_tokens", "reasoning_task_scale"):
            for key, value in getattr(self, table).items():
                if value < 0:
                    raise ValueError(f"{table}.{key}: must be >= 0, got {value}")
        return self


class NodeGroupConfig(Strict):
    """Nodes of one hardware kind: what the pools on that hardware draw their replicas from."""

    hardware: str
    chips_per_node: int = Field(8, gt=0)
    count: int = Field(ge=0)  # nodes at start (and always, for a fixed fleet)
    max_count: int | None = Field(None, ge=0)  # > count: elastic, the autoscaler rents more
    price_per_hour_usd: float | None = Field(None, ge=0)  # None: chips x the hardware's price

    @model_validator(mode="after")
    def _bounds(self) -> NodeGroupConfig:
        if self.max_count is not None and self.max_count < self.count:
            raise ValueError("max_count must be >= count")
        return self


class FleetConfig(Strict):
    """``[fleet]``: the nodes the deployments share and how replicas are assigned to pools."""

    policy: Literal["static", "proportional", "priority"] = "static"
    nodes: dict[str, NodeGroupConfig] = Field(default_factory=dict)
    interval_s: float = Field(15.0, gt=0)  # the autoscaler looks at demand this often
    reaction_s: float = Field(60.0, ge=0)  # decision -> replica serving in its new pool
    target_utilization: float = Field(0.9, gt=0, le=1)  # batch-slot share it aims for
    tenant_tick_s: float = Field(2.0, ge=0.05, le=10)  # the other tenants' load moves per tick
    seed: int = 1  # the other tenants' arrivals (simulate uses its --seed)


class SimConfig(Strict):
    hardware: dict[str, dict[str, Any]] = Field(default_factory=dict)  # extra hardware profiles
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)  # extra model profiles
    deployments: dict[str, DeploymentConfig]
    tiers: dict[str, TierConfig]
    pricing: PricingConfig = PricingConfig()
    scripts: list[ScriptConfig] = Field(default_factory=list)
    fleet: FleetConfig | None = None  # None: each deployment keeps its replicas (static)
    behavior: dict[str, BehaviorConfig] = Field(default_factory=dict)  # per model profile

    @model_validator(mode="after")
    def _references(self) -> SimConfig:
        for name, tier in self.tiers.items():
            if tier.deployment not in self.deployments:
                raise ValueError(
                    f"tiers.{name}.deployment: unknown {tier.deployment!r}; "
                    f"allowed: {', '.join(sorted(self.deployments))}"
                )
        served = {d.model for d in self.deployments.values()}
        for model in self.behavior:
            if model not in served:
                raise ValueError(f"behavior.{model}: no deployment serves this model; served: "
                                 f"{', '.join(sorted(served))}")
        ref = self.pricing.reference_tier
        if ref not in self.tiers:
            raise ValueError(f"pricing.reference_tier: unknown tier {ref!r}")
        if self.tiers[ref].prices is None:
            raise ValueError(f"tiers.{ref}.prices: the reference tier must have prices")
        for name, tier in self.tiers.items():
            if tier.tenants is not None and self.deployments[tier.deployment].has_background:
                raise ValueError(
                    f"tiers.{name}.tenants: deployment {tier.deployment!r} also has a "
                    f"[background]; give the other tenants one way only"
                )
        if self.fleet is not None:
            _check_fleet(self.fleet, self)
        return self


def _check_fleet(fleet: FleetConfig, cfg: SimConfig) -> None:
    """Every deployment draws from the node group of its hardware, and the starting replicas
    fit the nodes; the priority policy needs a pool shared by tiers of different priorities."""
    by_hw: dict[str, str] = {}
    for gname, g in fleet.nodes.items():
        if g.hardware in by_hw:
            raise ValueError(f"fleet.nodes.{gname}: a second group of hardware {g.hardware!r}")
        by_hw[g.hardware] = gname
    used: dict[str, int] = {}
    for dname, d in cfg.deployments.items():
        group = by_hw.get(d.hardware)
        if group is None:
            raise ValueError(
                f"fleet.nodes: no node group of hardware {d.hardware!r} for deployment "
                f"{dname!r}; add [fleet.nodes.NAME] with hardware = {d.hardware!r}"
            )
        per = -(-d.replica_chips // fleet.nodes[group].chips_per_node)
        used[group] = used.get(group, 0) + per * d.replicas
        if d.max_replicas is not None and d.max_replicas < max(d.replicas, d.min_replicas):
            raise ValueError(f"deployments.{dname}.max_replicas: below replicas/min_replicas")
    for gname, n in used.items():
        if n > fleet.nodes[gname].count:
            raise ValueError(
                f"fleet.nodes.{gname}.count: the deployments start with {n} nodes of it, "
                f"the group has {fleet.nodes[gname].count}"
            )
    if fleet.policy == "priority":
        shared = any(
            len({t.priority for t in cfg.tiers.values() if t.deployment == d}) > 1
            for d in cfg.deployments
        )
        if not shared:
            raise ValueError(
                "fleet.policy: priority needs one deployment shared by tiers of different "
                "priority (tiers.NAME.priority)"
            )
