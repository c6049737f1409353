"""``fastmode engine``: one deployment of the config as its own OpenAI-compatible server.

This is what a vLLM instance is to a real gateway: the gateway (``fastmode serve`` with
``[remote.tiers.*]`` in its config) fronts several of these processes. The engine serves the
normal app on a config reduced to one deployment: one tier of the deployment's name, with the
prices and quality of the tier that uses it (derived prices resolved to numbers), and a route for
every model the full config serves from that deployment, on both /v1 and /fast/v1. No auth and no
remote tiers: the gateway in front does both.
"""

from __future__ import annotations

import argparse
from typing import Any

from .config import Config, ConfigError, load_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "engine", help="serve one deployment of the config as an OpenAI-compatible engine"
    )
    p.add_argument("--deployment", required=True, help="deployment name in the config")
    p.add_argument("--host", help="bind address (default: config server.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: config server.port, 8000)")
    p.add_argument("--config", help="TOML config file (default: the built-in one)")
    p.add_argument("--replicas", type=int,
                   help="replicas in this process (default: the deployment's `replicas`)")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    p.set_defaults(func=run)


def engine_config(config: Config, deployment: str, replicas: int | None = None) -> Config:
    """The config of an engine serving ``deployment`` alone (ConfigError if it is unknown)."""
    from backends.engine import build

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
    models = [m for m, r in config.routes.items() if r.standard in names or r.fast in names]
    dep = config.deployments[deployment].model_dump()
    if replicas is not None:
        dep["replicas"] = replicas
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
        "scripts": [s.model_dump(exclude_none=True) for s in config.scripts],
        "server": config.server.model_dump(),
        "routes": {m: {"standard": deployment, "fast": deployment} for m in models},
    }
    return Config.model_validate(raw)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app

    config = engine_config(load_config(args.config), args.deployment, args.replicas)
    updates: dict[str, Any] = {}
    if args.host:
        updates["host"] = args.host
    if args.port is not None:
        updates["port"] = args.port
    if updates:
        config = config.model_copy(update={"server": config.server.model_copy(update=updates)})
    server = config.server
    dep = config.deployments[args.deployment]
    print(
        f"fastmode engine — deployment {args.deployment} ({dep.model} on {dep.chips}x "
        f"{dep.hardware}, {dep.replicas} replica(s)); models: {', '.join(config.routes)}; "
        f"http://{server.host}:{server.port}/v1",
        flush=True,
    )
    uvicorn.run(
        create_app(config),
        host=server.host,
        port=server.port,
        log_level=args.log_level,
        loop="uvloop",
        http="httptools",
        ws="none",  # engines serve HTTP only, as vLLM does; the gateway speaks websocket
        timeout_graceful_shutdown=30,
    )
    return 0
