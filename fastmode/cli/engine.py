"""``fastmode engine``: serve one deployment of the config as an OpenAI-compatible engine."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.config import load_config
from gateway.engine_config import engine_config


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.edge.app import create_app

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
