"""The config of one engine process: one deployment of the full config, as its own server.

This is what a vLLM instance is to a real gateway: the gateway (``fastmode serve`` with
``[remote.tiers.*]`` in its config) fronts several of these processes. The engine serves the
normal app on a config reduced to one deployment: one tier of the deployment's name, with the
prices and quality of the tier that uses it (derived prices resolved to numbers), and a route for
every model the full config serves from that deployment, on both /v1 and /fast/v1. No auth and no
remote tiers: the gateway in front does both.
"""

from __future__ import annotations

from typing import Any

from fastmode.backends.engine import build
from fastmode.gateway.config import Config, ConfigError


def engine_config(config: Config, deployment: str, replicas: int | None = None,
                  served: list[str] | None = None) -> Config:
    """The config of an engine serving ``deployment`` alone (ConfigError if it is unknown);
    ``served``: the model ids it serves instead of its routes' (vLLM's
    ``--served-model-name``)."""
    if deployment not in config.deployments:
        raise ConfigError(
            f"--deployment: unknown deployment {deployment!r}; "
            f"allowed: {', '.join(sorted(config.deployments))}"
        )
    if replicas is not None and replicas < 1:
        raise ConfigError("--replicas: must be at least 1")
    spec = build(config.sim())
    on_dep = [t for t in spec.tiers.values() if t.deployment.name == deployment]
    if not on_dep:
        raise ConfigError(f"--deployment: no tier uses deployment {deployment!r}")
    tier = next((t for t in on_dep if t.name == deployment), on_dep[0])
    names = {t.name for t in on_dep}
    models = [m for m, r in config.routes.items() if set(r.roles().values()) & set(names)]
    if served:
        models = list(dict.fromkeys(served))
    dep = config.deployments[deployment].model_dump()
    if replicas is not None:
        dep["replicas"] = replicas
    if "prefix_cache_blocks" not in config.deployments[deployment].model_fields_set:
        dep["prefix_cache_blocks"] = True  # an engine's cache is vLLM's blocks
    demand = spec.deployments[deployment].tenants
    if demand is not None:  # the other tenants' mean load per replica, as a constant background
        bg = demand.background
        dep["background"] = {"occupancy": bg.seqs / dep["max_batch"],
                             "context_tokens": bg.context_tokens,
                             "prefill_tokens_per_step": bg.prefill_tokens_per_step}
    p = tier.prices
    raw: dict[str, Any] = {
        "hardware": config.hardware,
        "models": config.models,
        "deployments": {deployment: dep},
        "tiers": {
            deployment: {
                "deployment": deployment,
                "description": tier.description,
                "prices": {"input": p.input, "cached_input": p.cached_input, "output": p.output},
                "quality": config.tiers[tier.name].quality.model_dump(),
            }
        },
        "pricing": {"reference_tier": deployment},
        # what its model does (reasoning, raw reasoning, reply lengths): as in the full config
        "behavior": {m: b.model_dump() for m, b in config.behavior.items()
                     if m == config.deployments[deployment].model},
        "scripts": [s.model_dump(exclude_none=True) for s in config.scripts],
        "server": {**config.server.model_dump(), "engine": True},
        "routes": {m: {"standard": deployment, "fast": deployment} for m in models},
    }
    return Config.model_validate(raw)
