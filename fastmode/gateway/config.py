"""The whole configuration: the simulation's sections plus the gateway's own.

One TOML file, validated here. The built-in default ships as ``fastmode/gateway/data/default.toml``;
every knob is documented there with its unit and the source of its default. A user's file is
laid over it (``gateway.overlay``): it says only what differs.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from fastmode.backends.config import PriceConfig, SimConfig, Strict
from fastmode.gateway.cassette_config import RecordConfig, ReplayConfig
from fastmode.gateway.fault_kinds import Kind
from fastmode.gateway.overlay import overlay

# the wire parameters whose echoed word a route may set (gateway.protocols.vocabulary): OpenAI's
# service_tier and Anthropic's speed
ECHO_PARAMS = ("service_tier", "speed")


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    # this process is an engine (``fastmode engine``): vLLM's own routes (/tokenize, /sleep,
    # ...) and its X-Request-Id echo (gateway.endpoints.vllm_api)
    engine: bool = False
    port: int = Field(8000, ge=0, le=65535)
    fast_overflow: Literal["reject", "downgrade"] = "reject"
    overload_status: Literal[429, 503] = 503
    retry_after_s: float = Field(1.0, ge=0)
    emulate_rtt_ms: float = Field(0.0, ge=0)
    max_connection_age_s: float = Field(3600.0, gt=0)
    default_max_tokens: int = Field(4096, gt=0)
    max_queue_wait_s: float = Field(20.0, gt=0)  # modeled queue wait beyond which: overload
    stream_max_lag_s: float = Field(30.0, gt=0)  # a reader further behind is cut
    # wall seconds per modeled second of the real-time engine (backends.drivers.clock): 0.01
    # streams a 10 s modeled answer in 0.1 s; every reported time stays in modeled seconds
    time_scale: float = Field(1.0, gt=0)
    # ground truth per request (gateway.tracing): every request (else: x-fastmode-trace: 1),
    # the last N kept in memory, and a JSONL file each finished trace is appended to
    trace_all: bool = False
    trace_keep: int = Field(1000, ge=1)  # ~120 bytes per event kept
    trace_file: str = ""
    # traced requests keep their body and headers (else: x-fastmode-trace: body), redacted as
    # [record] redacts; each string cut to this many characters, the whole to about this size
    trace_bodies: bool = False
    trace_body_string_chars: int = Field(2000, ge=16)
    trace_body_max_bytes: int = Field(65536, ge=1024)
    shutdown_grace_s: float = Field(30.0, ge=0)  # SIGTERM: in-flight streams get this long
    # kernel send buffer per connection (SO_SNDBUF; 0 = the kernel's autotuning): bounds what a
    # stalled reader can park in the kernel, so the watchdog sees it stop within seconds
    socket_send_buffer_bytes: int = Field(262144, ge=0)
    ws_max_connections: int = Field(1024, ge=1)  # open websockets, whole server
    ws_max_connections_per_key: int = Field(64, ge=1)  # open websockets per API key
    ws_idle_timeout_s: float = Field(300.0, gt=0)  # a websocket with no frame and no turn
    # connection hygiene (gateway.connections): a request head must be complete this long
    # after the connection opened (or a keep-alive connection's next request began): 408
    header_timeout_s: float = Field(10.0, gt=0)
    keep_alive_timeout_s: int = Field(5, ge=1)  # an idle keep-alive connection is closed
    max_connections: int = Field(8192, ge=1)  # open connections, whole process: 503 past it
    max_connections_per_client: int = Field(2048, ge=1)  # from one client address: 429


class LimitsConfig(Strict):
    """``[limits]``: bounds on what a client controls (gateway.limits)."""

    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    max_header_bytes: int = Field(32 * 1024, ge=1024)
    max_json_depth: int = Field(64, ge=4)
    max_json_values: int = Field(1_000_000, ge=1000)  # , : [ { outside strings, pre-parse
    max_messages: int = Field(2048, ge=1)
    max_tools: int = Field(128, ge=1)
    max_content_parts: int = Field(16384, ge=1)  # content parts in all messages together
    max_stop_sequences: int = Field(16, ge=1)
    max_stop_sequence_chars: int = Field(1024, ge=1)
    max_schema_depth: int = Field(32, ge=2)
    max_schema_items: int = Field(1000, ge=1)
    max_schema_string_length: int = Field(100_000, ge=1)
    max_schema_enum: int = Field(1000, ge=1)
    max_schema_values: int = Field(100_000, ge=10)


class StateConfig(Strict):
    """``[state]``: the shared-state store (usage ledger, buckets, responses, settings)."""

    # ${FASTMODE_LEDGER} (the environment) overrides the file name under the working directory
    path: str = Field("${FASTMODE_LEDGER:-fastmode-ledger.sqlite3}", validate_default=True,
                      min_length=1)
    flush_interval_s: float = Field(0.25, gt=0, le=1.0)
    # redis://host:port/db: share the state between gateway processes or machines (Redis
    # replaces the SQLite file); ${FASTMODE_REDIS_URL} expanded. "" = the embedded file.
    redis_url: str = Field("${FASTMODE_REDIS_URL:-}", validate_default=True)
    # every Redis call on a request's path gives up after this long (connect, read, a free
    # pooled connection); an outage then fails requests fast instead of holding them
    timeout_s: float = Field(0.25, gt=0, le=5.0)
    # Redis unavailable: a key with a limit is refused 503 (false) or served without its
    # limit being counted (true). docs/shared-state.md, "When Redis fails"
    limits_fail_open: bool = False
    # Redis unavailable: stored objects and ledger rows wait in memory until it is back; past
    # this many, new requests get 503 (nothing the client was told about is dropped)
    pending_max: int = Field(10_000, ge=1)

    @field_validator("path")
    @classmethod
    def _expand(cls, v: str) -> str:
        return expand_env(v)

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, v: str) -> str:
        url = expand_env(v).strip()
        if url and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{url!r} is not a redis://, rediss:// or unix:// URL")
        return url


class FaultRule(Strict):
    """One configured fault: injected with probability ``p`` into matching requests."""

    kind: Kind  # gateway.values.fault_spec: the one list of kinds
    p: float = Field(1.0, ge=0, le=1)
    after: int = Field(0, ge=0)  # output tokens before a mid-stream fault
    s: float | None = Field(None, ge=0, le=3600)  # stall / timeout seconds
    tier: str | None = None  # match only these requests (None: any)
    key: str | None = None
    model: str | None = None


class FaultsConfig(Strict):
    """``[faults]``: fault injection (gateway.faults)."""

    enabled: bool = True  # the x-fastmode-fault header and the rules below
    seed: int | None = None  # reproducible draws (None: random)
    stall_s: float = Field(10.0, ge=0, le=3600)
    timeout_s: float = Field(60.0, ge=0, le=3600)
    rules: list[FaultRule] = Field(default_factory=list)


class AdminConfig(Strict):
    """``[admin]``: the /admin API (off by default; its own key)."""

    enabled: bool = False
    key: str = ""

    @model_validator(mode="after")
    def _key(self) -> AdminConfig:
        if self.enabled and not self.key:
            raise ValueError("admin.key must be set when admin.enabled = true")
        return self


class RouteConfig(Strict):
    """``[routes.MODEL]``: which tier serves each role (``gateway.values.roles``) for this model id.
    ``standard`` is required; ``fast`` (absent: fast requests are served standard), ``flex``
    (absent: a 400) and any other role a protocol's vocabulary names (e.g. ``ultrafast =
    "my-tier"``) are optional. Tier names are the config's own: nothing on the wire shows them.

    A model id may also carry its *price era* and its words (``gateway.values.price_eras``): its own
    list ``prices`` and a ``price_factor`` per role (Claude Opus 4.6's fast mode at 6x, Opus 5's
    at 2x, on the same tiers), the word each role is echoed as where the model differs from its
    protocol (``echo``: OpenAI's newer models echo ``fast``, older ones ``priority``), and, as
    documentation checked by the tests, the provider's published speed-ups (``speedup``) and the
    ``sources`` of all of it."""

    model_config = ConfigDict(extra="allow", frozen=True)
    standard: str
    fast: str | None = None
    flex: str | None = None
    description: str = ""  # e.g. "alias: Claude Opus 4.6 on frontier's tiers"
    prices: PriceConfig | None = None  # the model's standard list prices (None: the tiers')
    # role -> multiple of ``prices`` (of the reference tier's without them); a role without one
    # bills its tier's own multiple of the reference tier (derived from hardware cost)
    price_factor: dict[str, float] = Field(default_factory=dict)
    echo: dict[str, dict[str, str]] = Field(default_factory=dict)  # role -> {param: word}
    speedup: dict[str, float] = Field(default_factory=dict)  # role -> published "up to N x"
    sources: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _extra_roles_name_tiers(self) -> RouteConfig:
        for role, tier in (self.model_extra or {}).items():
            if not isinstance(tier, str):
                raise ValueError(f"{role}: a tier name (a string), not {tier!r}")
        offered = self.roles()
        for table in ("price_factor", "echo", "speedup"):
            for role in getattr(self, table):
                if role not in offered:
                    raise ValueError(f"{table}.{role}: the route has no tier for role {role!r}; "
                                     f"its roles: {', '.join(sorted(offered))}")
        for role, value in (*self.price_factor.items(), *self.speedup.items()):
            if not value > 0:
                raise ValueError(f"{role}: must be > 0, got {value}")
        for role, words in self.echo.items():
            for param, word in words.items():
                if param not in ECHO_PARAMS or not word:
                    raise ValueError(f"echo.{role}.{param}: a non-empty word for one of "
                                     f"{', '.join(ECHO_PARAMS)}")
        return self

    def roles(self) -> dict[str, str]:
        """role -> tier name, for every role this model offers."""
        out = {"standard": self.standard, "fast": self.fast, "flex": self.flex,
               **(self.model_extra or {})}
        return {role: tier for role, tier in out.items() if tier is not None}


class TierLimit(Strict):
    requests_per_minute: int | None = Field(None, gt=0)
    tokens_per_minute: int | None = Field(None, gt=0)
    input_tokens_per_minute: int | None = Field(None, gt=0)  # Anthropic's ITPM
    output_tokens_per_minute: int | None = Field(None, gt=0)  # Anthropic's OTPM (max_tokens)


class ApiKey(Strict):
    key: str = Field(min_length=1)
    tiers: list[str] = Field(default_factory=list)  # empty = every tier
    limits: dict[str, TierLimit] = Field(default_factory=dict)


class AuthConfig(Strict):
    enabled: bool = False
    keys: list[ApiKey] = Field(default_factory=list)


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(text: str) -> str:
    """``${VAR}`` / ``${VAR:-default}`` from the environment (ValueError if unset, no default)."""

    def sub(m: re.Match[str]) -> str:
        value = os.environ.get(m.group(1))
        if value:
            return value
        if m.group(2) is None:
            raise ValueError(f"environment variable {m.group(1)} is not set and has no default")
        return m.group(2)

    return _ENV_REF.sub(sub, text)


class RemoteTierConfig(Strict):
    """A tier served by remote OpenAI-compatible servers instead of an in-process deployment."""

    upstreams: list[str] = Field(min_length=1)  # base URLs (no /v1); ${VAR:-default} expanded
    health_path: str = "/healthz"  # fastmode engines; "/health" or "/v1/models" for vLLM & co
    model: str | None = None  # model id sent upstream (default: the one the client asked for)
    api_key_env: str | None = None  # env var holding a bearer token for the upstreams

    @field_validator("upstreams")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        out = []
        for raw in urls:
            url = expand_env(raw).strip().rstrip("/")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"upstream {url!r} must be an http:// or https:// base URL")
            out.append(url)
        if len(set(out)) != len(out):
            raise ValueError("upstreams must be distinct")
        return out


class RemoteConfig(Strict):
    """``[remote]``: upstream pools per tier (see docs/deployment.md)."""

    tiers: dict[str, RemoteTierConfig] = Field(default_factory=dict)
    health_interval_s: float = Field(1.0, gt=0)
    health_timeout_s: float = Field(1.0, gt=0)
    connect_timeout_s: float = Field(2.0, gt=0)
    stream_idle_timeout_s: float = Field(60.0, gt=0)  # longest silence inside a stream
    request_timeout_s: float = Field(600.0, gt=0)  # a whole non-streamed request
    max_attempts: int = Field(3, ge=1)  # upstreams tried per request before anything streamed
    max_idle_connections: int = Field(256, gt=0)  # kept-alive connections per upstream


class EmbeddingModelConfig(Strict):
    """``[embeddings.models.ID]``: an embedding model id served at ``/v1/embeddings``."""

    model: str  # the model profile whose prefill is timed (fastmode/backends/data/models.toml)
    dimensions: int = Field(gt=0, le=16384)  # the vector's full length
    shortenable: bool = True  # accepts `dimensions` (text-embedding-3-*), ada-002 does not
    price: float | None = Field(None, ge=0)  # USD per MTok; None: derived (backends.embeddings)


def _embedding_models() -> dict[str, EmbeddingModelConfig]:
    # OpenAI's three ids, on the Qwen3-Embedding bodies of about their size
    small = EmbeddingModelConfig(model="qwen3-embedding-0.6b", dimensions=1536)
    return {"text-embedding-3-small": small,
            "text-embedding-3-large": EmbeddingModelConfig(model="qwen3-embedding-8b",
                                                           dimensions=3072),
            "text-embedding-ada-002": small.model_copy(update={"shortenable": False})}


class EmbeddingsConfig(Strict):
    """``[embeddings]``: the embedding pool (``gateway.endpoints.embeddings``, docs/embeddings.md)."""

    hardware: str = "b200"
    chips: int = Field(1, gt=0)
    precision: Literal["bf16", "fp8", "int8"] = "bf16"
    batch_tokens: int = Field(8192, gt=0)  # tokens per packed prefill step
    seq_tokens: int = Field(512, gt=0)  # typical input length in the packed batch
    max_inputs: int = Field(2048, gt=0)  # OpenAI: 2,048 inputs per request
    max_input_tokens: int = Field(8192, gt=0)  # OpenAI: 8,192 tokens per input
    max_request_tokens: int = Field(300_000, gt=0)  # OpenAI: 300,000 tokens per request
    models: dict[str, EmbeddingModelConfig] = Field(default_factory=_embedding_models)


class BatchesConfig(Strict):
    """``[batches]``: OpenAI's Batch API and Anthropic's Message Batches (``gateway.batches``,
    docs/batches.md): requests run on a modeled pool at a large batch, priced from it."""

    max_batch: int = Field(1024, gt=0)  # sequences per step of the batch pool (the model's
    # deployment of the reference tier, run at this batch: what makes it cheap and slow)
    prompt_tokens: int = Field(1500, gt=0)  # the pool's typical request: its prompt...
    output_tokens: int = Field(1000, gt=0)  # ...and reply, tokens (context, fresh prefill)
    slots: int = Field(64, gt=0)  # of one batch, requests running at once (others: tenants')
    price_factor: float | None = Field(None, gt=0)  # x the standard prices; None: derived
    time_scale: float = Field(1.0, gt=0)  # wall seconds per modeled second (tests: 0.001)
    completion_window_s: float = Field(86400.0, gt=0)  # "24h": later requests expire
    max_requests: int = Field(50_000, gt=0)  # OpenAI: 50,000 requests per batch
    max_file_bytes: int = Field(200 * 1024 * 1024, gt=0)  # OpenAI: 200 MB per input file
    max_stored_bytes: int = Field(1024**3, gt=0)  # all files kept in memory: uploads refused past it


class RoutePattern(Strict):
    """``[[route_patterns]]``: model ids no ``[routes.ID]`` names, served as a named route when
    they match a glob (``fnmatch``: ``*`` any run of characters, ``?`` one, ``[…]`` a set;
    case-sensitive). The first pattern that matches wins, so a client's next release (a new
    ``claude-*`` or ``gpt-*`` id) is served without a config change."""

    match: str = Field(min_length=1)  # e.g. "*-codex-spark", "claude-*haiku*", "gpt-*"
    like: str  # the [routes.ID] it is served and billed as (its tiers, prices and words)


class Config(SimConfig):
    server: ServerConfig = ServerConfig()
    routes: dict[str, RouteConfig]
    route_patterns: list[RoutePattern] = Field(default_factory=list)
    auth: AuthConfig = AuthConfig()
    remote: RemoteConfig = RemoteConfig()
    limits: LimitsConfig = LimitsConfig()
    state: StateConfig = StateConfig()
    faults: FaultsConfig = FaultsConfig()
    admin: AdminConfig = AdminConfig()
    record: RecordConfig = RecordConfig()  # gateway.cassettes: docs/replay.md
    replay: ReplayConfig = ReplayConfig()
    embeddings: EmbeddingsConfig = EmbeddingsConfig()
    batches: BatchesConfig = BatchesConfig()

    @model_validator(mode="after")
    def _routes(self) -> Config:
        for model, route in self.routes.items():
            for kind, tier in route.roles().items():
                if tier not in self.tiers:
                    raise ValueError(
                        f"routes.{model}.{kind}: unknown tier {tier!r}; "
                        f"allowed: {', '.join(sorted(self.tiers))}"
                    )
        for i, pattern in enumerate(self.route_patterns):
            if pattern.like not in self.routes:
                raise ValueError(f"route_patterns[{i}].like: no route {pattern.like!r}")
        for i, rule in enumerate(self.faults.rules):
            if rule.tier is not None and rule.tier not in self.tiers:
                raise ValueError(f"faults.rules[{i}].tier: unknown tier {rule.tier!r}")
        for tier in self.remote.tiers:
            if tier not in self.tiers:
                raise ValueError(
                    f"remote.tiers.{tier}: unknown tier; allowed: {', '.join(sorted(self.tiers))}"
                )
        return self

    def route_of(self, model: str) -> str | None:
        """The ``[routes]`` key serving ``model``: its own, else the first matching pattern's
        ``like``, else None (an unknown model)."""
        if model in self.routes:
            return model
        for pattern in self.route_patterns:
            if fnmatch.fnmatchcase(model, pattern.match):
                return pattern.like
        return None

    def sim(self) -> SimConfig:
        return SimConfig.model_validate(
            self.model_dump(include=set(SimConfig.model_fields)), strict=False
        )


class ConfigError(ValueError):
    """The config file is unreadable or invalid; the message names the field."""


def default_config_text() -> str:
    return resources.files("fastmode.gateway.data").joinpath("default.toml").read_text("utf-8")


def load_config(path: str | Path | None = None) -> Config:
    """Load and validate a config file laid over the built-in default (``gateway.overlay``),
    or the built-in default when ``path`` is None."""
    try:
        text = default_config_text() if path is None else Path(path).read_text("utf-8")
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {path or 'default'} is not valid TOML: {exc}") from None
    if path is not None:
        try:
            raw = overlay(tomllib.loads(default_config_text()), raw, Config.model_fields)
        except ValueError as exc:
            raise ConfigError(f"config: {exc}") from None
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        raise ConfigError(f"config: {loc}: {err['msg']}") from None
