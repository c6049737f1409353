"""``fastmode serve``: run the gateway with uvicorn (uvloop + httptools).

Everything that can fail fails before the banner: the config (and the command-line overrides)
is validated, and the listening socket is bound, so a bad port or a busy one is a one-line
error with exit status 2, never a banner followed by a failure or a hang. SIGTERM drains the
gateway gracefully (``gateway.edge.shutdown``).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys

from pydantic import ValidationError

from fastmode.cli import _cassettes, _faults
from fastmode.gateway.config import Config, ConfigError, ServerConfig, StateConfig, load_config


class UsageError(Exception):
    """A bad option: printed as one line by ``fastmode.cli.main`` (exit status 2)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the gateway (HTTP + websocket) on the config's tiers")
    p.add_argument("--host", help="bind address (default: config server.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: config server.port, 8000)")
    p.add_argument("--config", help="TOML config file (default: the built-in one)")
    p.add_argument("--emulate-rtt-ms", type=float, help="modeled network round trip, ms")
    p.add_argument("--time-scale", type=float,
                   help="wall seconds per modeled second (default: config server.time_scale, "
                   "1.0; 0.01 streams 100x faster, every reported time stays modeled)")
    p.add_argument("--trace", action="store_true", default=None,
                   help="record every request's ground truth (GET /v1/fastmode/traces; "
                        "without it, only requests with x-fastmode-trace: 1)")
    p.add_argument("--trace-file", help="also append each finished trace to this JSONL file")
    p.add_argument("--trace-bodies", action="store_true", default=None,
                   help="traced requests keep their body and headers, redacted as --record "
                        "redacts (without it, only requests with x-fastmode-trace: body)")
    p.add_argument("--ledger", help="usage ledger / state file (SQLite; default: config "
                   "[state] path, fastmode-ledger.sqlite3 in the working directory)")
    p.add_argument("--log-level", default="warning",
                   help="log level (default warning; info: each request's access line and "
                        "each refused request's reason)")
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes on the one port, each owning a share of every "
                   "deployment's replicas (default 1; see docs/deployment.md)")
    _faults.add_arguments(p)  # --clear-faults
    _cassettes.add_arguments(p)  # --record, --replay, --replay-*, --upstream
    p.set_defaults(func=run)


def describe(config: Config) -> list[str]:
    """One line per tier: model, modeled speed for one more user (or its upstreams), prices."""
    from fastmode.backends.engine import build
    from fastmode.backends.pricing import operating_step_seconds

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


def configure(args: argparse.Namespace) -> Config:
    """The config with the command-line overrides, validated like the file itself."""
    config = load_config(args.config)
    updates: dict[str, object] = {}
    if args.host:
        updates["host"] = args.host
    if args.port is not None:
        updates["port"] = args.port
    if args.emulate_rtt_ms is not None:
        updates["emulate_rtt_ms"] = args.emulate_rtt_ms
    if getattr(args, "time_scale", None) is not None:
        updates["time_scale"] = args.time_scale
    if getattr(args, "trace", None):
        updates["trace_all"] = True
    if getattr(args, "trace_file", None):
        updates["trace_file"] = args.trace_file
    if getattr(args, "trace_bodies", None):
        updates["trace_bodies"] = True
    try:
        server = ServerConfig.model_validate({**config.server.model_dump(), **updates})
        state = config.state
        if args.ledger:
            state = StateConfig.model_validate({**state.model_dump(), "path": args.ledger})
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"])
        flag = {"port": "--port", "host": "--host", "emulate_rtt_ms": "--emulate-rtt-ms",
                "path": "--ledger", "time_scale": "--time-scale"}.get(name, name)
        raise UsageError(f"{flag}: {err['msg']}") from None
    check_ledger(state.path, state.redis_url)
    config = _cassettes.apply(args, config)
    return config.model_copy(update={"server": server, "state": state})


def ledger_location(state: StateConfig) -> str:
    """Where the usage ledger (and the rest of the state) is: the Redis server when one is
    configured (its credentials left out), else the SQLite file."""
    if not state.redis_url:
        return state.path
    from urllib.parse import urlsplit

    url = urlsplit(state.redis_url)
    where = url.hostname or url.path
    if url.port:
        where += f":{url.port}"
    return f"Redis at {url.scheme}://{where}{url.path if url.hostname else ''}"


def check_ledger(path: str, redis_url: str = "") -> None:
    """Open the ledger file now (and close it): an unwritable path is a one-line error before
    the banner, not a failure of the app's start-up after it."""
    import sqlite3
    from pathlib import Path

    if redis_url:
        return  # the state is in Redis (gateway.state): nothing to open here
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("PRAGMA journal_mode=WAL")
    except (OSError, sqlite3.Error) as exc:
        raise UsageError(f"--ledger: cannot open {path}: {exc}") from None


def bind(host: str, port: int, send_buffer: int = 0) -> socket.socket:
    """The listening socket, bound now (uvicorn gets it already bound). ``send_buffer``
    (``server.socket_send_buffer_bytes``) is inherited by every accepted connection."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host: cannot resolve {host!r}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def run(args: argparse.Namespace) -> int:
    from fastmode.gateway.app import create_app
    from fastmode.gateway.workers.server import serve

    config = configure(args)
    server = config.server
    if args.workers != 1:
        return run_workers(args, config)
    try:
        app = create_app(config)  # builds the engine: a config the physics rejects fails here
    except ValueError as exc:
        raise ConfigError(f"config: {exc}") from None
    sock = bind(server.host, server.port, server.socket_send_buffer_bytes)
    faults = _faults.banner_lines(config.state, args.clear_faults)
    port = sock.getsockname()[1]
    base = f"http://{server.host}:{port}"
    print("fastmode gateway — tiers:")
    for line in describe(config):
        print(line)
    print(f"  OpenAI base_url:      {base}/v1        (standard; model frontier-spark -> spark)")
    print(f"  fast endpoints:       {base}/fast/v1   (every request on the fast tier)")
    print(f"  websocket:            ws://{server.host}:{port}/v1/responses")
    print(f"  metrics:              {base}/metrics")
    print(f"  dashboard:            {base}/dashboard   (the buses filling, live)")
    for line in _cassettes.describe(config):
        print(line)
    print(f"  usage ledger:         {ledger_location(config.state)}")
    for line in faults:
        print(line)
    sys.stdout.flush()
    serve(app, config, [sock], args.log_level)  # uvicorn with the gateway's settings
    return 0


def run_workers(args: argparse.Namespace, config: Config) -> int:
    """``--workers N``: N processes on one port, each replica in exactly one of them."""
    from fastmode.gateway.app import create_app
    from fastmode.gateway.workers import Supervisor, WorkersError
    from fastmode.gateway.workers import describe as describe_workers

    try:
        create_app(config)  # a config the physics rejects fails here, before any worker
        supervisor = Supervisor(config, args.workers, args.log_level)
    except WorkersError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise ConfigError(f"config: {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {config.server.host}:{config.server.port}: "
                         f"{exc.strerror}") from None
    base = f"http://{config.server.host}:{supervisor.port}"
    faults = _faults.banner_lines(config.state, args.clear_faults)
    print(f"fastmode gateway — {args.workers} workers on {base} (SO_REUSEPORT); tiers:")
    for line in describe(config):
        print(line)
    for line in describe_workers(supervisor.configs) + _cassettes.describe(config):
        print(line)
    print(f"  OpenAI base_url:      {base}/v1")
    for line in faults:
        print(line)
    sys.stdout.flush()
    return supervisor.run()
