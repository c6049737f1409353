"""``fastmode serve``: run the gateway with uvicorn (uvloop + httptools)."""

from __future__ import annotations

import argparse

from gateway.config import Config, load_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the gateway (HTTP + websocket) on the config's tiers")
    p.add_argument("--host", help="bind address (default: config server.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: config server.port, 8000)")
    p.add_argument("--config", help="TOML config file (default: the built-in one)")
    p.add_argument("--emulate-rtt-ms", type=float, help="modeled network round trip, ms")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    p.set_defaults(func=run)


def describe(config: Config) -> list[str]:
    """One line per tier: model, modeled speed for one more user (or its upstreams), prices."""
    from backends.engine import build
    from backends.pricing import operating_step_seconds

    spec = build(config.sim())
    lines = []
    for name, tier in spec.tiers.items():
        remote = config.remote.tiers.get(name)
        if remote is not None:
            speed = f"remote: {len(remote.upstreams)} upstream(s)"
        else:
            d = tier.deployment
            speed = f"~{1 / operating_step_seconds(d.placement, d.background):7.0f} tok/s/user"
        p = tier.prices
        lines.append(
            f"  {name:<9} {tier.model:<15} {speed:<22} "
            f"${p.input:.2f} in / ${p.cached_input:.2f} cached / ${p.output:.2f} out per MTok"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import create_app
    from gateway.websocket import MAX_FRAME_BYTES

    config = load_config(args.config)
    server = config.server
    updates = {}
    if args.host:
        updates["host"] = args.host
    if args.port is not None:
        updates["port"] = args.port
    if args.emulate_rtt_ms is not None:
        updates["emulate_rtt_ms"] = args.emulate_rtt_ms
    if updates:
        config = config.model_copy(update={"server": server.model_copy(update=updates)})
    server = config.server
    base = f"http://{server.host}:{server.port}"
    print("fastmode gateway — tiers:")
    for line in describe(config):
        print(line)
    print(f"  OpenAI base_url:      {base}/v1        (standard; model frontier-spark -> spark)")
    print(f"  fast endpoints:       {base}/fast/v1   (every request on the fast tier)")
    print(f"  websocket:            ws://{server.host}:{server.port}/v1/responses")
    print(f"  metrics:              {base}/metrics", flush=True)
    app = create_app(config)
    uvicorn.run(
        app,
        host=server.host,
        port=server.port,
        log_level=args.log_level,
        loop="uvloop",
        http="httptools",
        ws="websockets-sansio",  # the legacy "websockets" implementation is deprecated
        ws_per_message_deflate=False,  # token frames are tiny: deflate only adds latency
        ws_max_size=MAX_FRAME_BYTES,  # larger frames are refused (close 1009), not buffered
        timeout_graceful_shutdown=30,
    )
    return 0
