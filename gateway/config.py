"""The whole configuration: the simulation's sections plus the gateway's own.

One TOML file, validated here. The built-in default ships as ``gateway/data/default.toml``;
every knob is documented there with its unit and the source of its default.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from backends.config import SimConfig, Strict


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    fast_overflow: Literal["reject", "downgrade"] = "reject"
    overload_status: Literal[429, 503] = 503
    retry_after_s: float = Field(1.0, ge=0)
    emulate_rtt_ms: float = Field(0.0, ge=0)
    max_connection_age_s: float = Field(3600.0, gt=0)
    default_max_tokens: int = Field(4096, gt=0)


class RouteConfig(Strict):
    standard: str
    fast: str


class TierLimit(Strict):
    requests_per_minute: int | None = Field(None, gt=0)
    tokens_per_minute: int | None = Field(None, gt=0)


class ApiKey(Strict):
    key: str = Field(min_length=1)
    tiers: list[str] = Field(default_factory=list)  # empty = every tier
    limits: dict[str, TierLimit] = Field(default_factory=dict)


class AuthConfig(Strict):
    enabled: bool = False
    keys: list[ApiKey] = Field(default_factory=list)


class Config(SimConfig):
    server: ServerConfig = ServerConfig()
    routes: dict[str, RouteConfig]
    auth: AuthConfig = AuthConfig()

    @model_validator(mode="after")
    def _routes(self) -> Config:
        for model, route in self.routes.items():
            for kind in ("standard", "fast"):
                tier = getattr(route, kind)
                if tier not in self.tiers:
                    raise ValueError(
                        f"routes.{model}.{kind}: unknown tier {tier!r}; "
                        f"allowed: {', '.join(sorted(self.tiers))}"
                    )
        return self

    def sim(self) -> SimConfig:
        return SimConfig.model_validate(
            self.model_dump(include=set(SimConfig.model_fields)), strict=False
        )


class ConfigError(ValueError):
    """The config file is unreadable or invalid; the message names the field."""


def default_config_text() -> str:
    return resources.files("gateway.data").joinpath("default.toml").read_text("utf-8")


def load_config(path: str | Path | None = None) -> Config:
    """Load and validate a config file, or the built-in default when ``path`` is None."""
    try:
        text = default_config_text() if path is None else Path(path).read_text("utf-8")
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {path or 'default'} is not valid TOML: {exc}") from None
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        raise ConfigError(f"config: {loc}: {err['msg']}") from None
