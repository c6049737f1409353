"""``fastmode engine``: serve one deployment of the config as an OpenAI-compatible engine.

It takes ``vllm serve``'s flags where they mean something for a modeled engine (batch limits,
the prefix cache's blocks and hashes, KV events, parallelism, the served names) and maps them
onto the deployment; any other flag (``--dtype``, ``--trust-remote-code``, a model path given
as ``vllm serve MODEL``) is accepted and ignored with one warning line, so a pod spec written
for vLLM starts unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError

from fastmode.cli import _vllm_features
from fastmode.gateway.config import Config, ConfigError, load_config
from fastmode.gateway.engine_config import engine_config

# vLLM flag -> deployment field it sets
_DEPLOYMENT_FLAGS = {
    "max_num_seqs": "max_batch",
    "max_num_batched_tokens": "max_batched_tokens",
    "gpu_memory_utilization": "memory_utilization",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "enable_prefix_caching": "prefix_caching",
    "tensor_parallel_size": "chips",
    "block_size": "block_size",
    "prefix_caching_hash_algo": "prefix_caching_hash_algo",
    "kv_events_config": "kv_events",
}


# the tables the LoRA and KV-transfer flags set (fastmode/cli/_vllm_features.py), for errors
_FEATURE_FLAGS = {"lora_modules": "lora", "kv_transfer_config": "kv_transfer"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "engine", help="serve one deployment of the config as an OpenAI-compatible engine",
        description="Serve one deployment as an engine with vLLM's surface. Other `vllm serve` "
                    "flags are accepted and ignored (one warning line).",
        allow_abbrev=False,
    )
    p.add_argument("--deployment", required=True, help="deployment name in the config")
    p.add_argument("--host", help="bind address (default: config server.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: config server.port, 8000)")
    p.add_argument("--config", help="TOML config file (default: the built-in one)")
    p.add_argument("--replicas", "--data-parallel-size", "-dp", type=int, dest="replicas",
                   help="data-parallel ranks in this process, each its own scheduler; a request "
                        "goes to the least loaded (4 x waiting + running) or to the rank its "
                        "X-data-parallel-rank header names (default: the deployment's "
                        "`replicas`)")
    p.add_argument("--log-level", "--uvicorn-log-level", default="warning", dest="log_level",
                   help="uvicorn log level (default warning)")
    v = p.add_argument_group("vLLM engine arguments (mapped onto the deployment)")
    v.add_argument("--served-model-name", nargs="+", metavar="NAME",
                   help="model ids served (default: every route of the deployment)")
    v.add_argument("--max-num-seqs", type=int, help="sequences per step (deployment max_batch)")
    v.add_argument("--max-num-batched-tokens", type=int,
                   help="tokens per step (deployment max_batched_tokens)")
    v.add_argument("--gpu-memory-utilization", type=float,
                   help="share of each chip's memory the engine takes (memory_utilization)")
    v.add_argument("--kv-cache-memory-bytes", "--kv-cache-memory", type=int, metavar="BYTES",
                   dest="kv_cache_memory_bytes",
                   help="KV cache per GPU in bytes, instead of sizing it by "
                        "--gpu-memory-utilization (deployment kv_cache_memory_bytes)")
    v.add_argument("--tensor-parallel-size", "-tp", type=int,
                   help="chips per replica (deployment chips)")
    v.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   help="keep computed prompt blocks (deployment prefix_caching)")
    v.add_argument("--block-size", type=int, help="tokens per prefix-cache block (16)")
    v.add_argument("--prefix-caching-hash-algo", choices=["sha256", "sha256_cbor"],
                   help="block hash function (sha256)")
    v.add_argument("--kv-events-config", metavar="JSON",
                   help='KV-cache events, as vLLM: \'{"enable_kv_cache_events": true, '
                        '"publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv-events", '
                        '"replay_endpoint": "tcp://*:5558"}\'')
    v.add_argument("--enable-sleep-mode", action="store_true",
                   help="accepted: /sleep, /wake_up and /is_sleeping are always served")
    v.add_argument("--enable-request-id-headers", action="store_true",
                   help="accepted: an engine always echoes X-Request-Id")
    _vllm_features.register(v)
    p.set_defaults(func=run)


def apply_flags(config: Config, args: argparse.Namespace) -> Config:
    """The config with the vLLM flags given applied to ``args.deployment``."""
    name = args.deployment
    if name not in config.deployments:
        return config  # engine_config names the unknown deployment
    updates: dict[str, Any] = {}
    for flag, field in _DEPLOYMENT_FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            updates[field] = value
    if "kv_events" in updates:
        try:
            updates["kv_events"] = json.loads(updates["kv_events"])
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--kv-events-config: not valid JSON: {exc}") from None
    dep = config.deployments[name]
    updates.update(_vllm_features.updates(args, dep.model_dump(exclude_unset=True)))
    if not updates:
        return config
    try:
        new = type(dep).model_validate({**dep.model_dump(exclude_unset=True), **updates})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err.get("loc", ())]
        field = loc[0] if loc else "?"
        flag = next((f for f, d in {**_DEPLOYMENT_FLAGS, **_FEATURE_FLAGS}.items()
                     if d == field), field)
        if field == "lora" and len(loc) > 1 and loc[1] in ("max_loras", "max_lora_rank"):
            flag = loc[1]  # the table's own flag
        where = f" ({'.'.join(loc[1:])})" if len(loc) > 1 else ""
        raise ConfigError(f"--{flag.replace('_', '-')}{where}: {err['msg']}") from None
    return config.model_copy(update={"deployments": {**config.deployments, name: new}})


def ignored_warning(ignored: list[str]) -> str | None:
    """The one line that names the arguments accepted and ignored (None: there are none)."""
    if not ignored:
        return None
    return ("fastmode engine: warning: ignoring vLLM arguments that mean nothing to a modeled "
            f"engine: {' '.join(ignored)}")


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from fastmode.gateway.app import create_app

    warning = ignored_warning(getattr(args, "ignored", None) or [])
    if warning:
        print(warning, file=sys.stderr, flush=True)
    config = engine_config(apply_flags(load_config(args.config), args), args.deployment,
                           args.replicas, args.served_model_name)
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
