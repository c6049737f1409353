"""What each part of the built-in config costs the gateway: the config a user gets from
``make serve`` beside variants that each change one part of it toward the bench config.

``bench/pacing.py`` measures the built-in config and the bench config (``gateway_overhead.
bench_config``) beside the bare ASGI app; the two differ in three parts, and this says what each
part costs fastmode's CPU alone:

- ``scripted``: every reply scripted as on the bench config (the mock model's prose, written
  once: ``gateway_overhead.script``), so nothing is generated per request;
- ``one-replica``: the spark deployment as one replica holding both replicas' batch and queue,
  on a static fleet (one engine step timer instead of two);
- ``tenants-1%``: the other tenants at 1% occupancy instead of half the batch (more of the
  benchmark's streams are seated at once, so a step's cost is spread over more of them).

Each variant runs in its own ``fastmode serve``, all pinned to one core (an idle server costs
nothing), this client on the other; the rows run on each server in turn, ``--repeat`` times,
and the table gives medians (range) and the change from the built-in config. Rows:
``requests`` (16-token Chat streams, 32 at a time: server CPU per request) and ``steady`` (100
spark streams of 1,000 tokens at one event per token: CPU per token, and how many streamed at
once).

Usage: python bench/config_costs.py [--repeat N] [--requests N] [--rows requests,steady]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.gateway_overhead import bench_config, prose, script
from bench.harness import ROOT, pin_self, stop, toml_dumps
from bench.pacing import Server, requests, serve, streams

Config = dict[str, Any]
TOKENS = 1000  # of the steady row's streams


def builtin() -> Config:
    return tomllib.loads((ROOT / "fastmode/gateway/data/default.toml").read_text())


def one_replica(cfg: Config) -> None:
    spark = cfg["deployments"]["spark"]
    n = spark.get("replicas", 1)
    spark.update(replicas=1, max_batch=spark["max_batch"] * n,
                 max_waiting=spark["max_waiting"] * n)
    cfg["fleet"]["policy"] = "static"


def tenants_few(cfg: Config) -> None:
    cfg["tiers"]["spark"]["tenants"]["occupancy"] = 0.01


def parts(reply: str) -> dict[str, Callable[[Config], None]]:
    """Each part of the bench config, by name; ``reply``: what the scripted one streams."""
    return {"scripted": lambda cfg: script(cfg, reply), "one-replica": one_replica,
            "tenants-1%": tenants_few}


def variants(reply: str | None = None) -> dict[str, str]:
    """Name -> config TOML: the built-in config, each part alone, all parts, the bench config,
    whose scripted reply is ``reply`` (by default the mock model's prose, as in
    ``bench/pacing.py``)."""
    if reply is None:
        reply = prose(TOKENS + 50)[0]
    out = {"built-in": toml_dumps(builtin())}
    for name, part in parts(reply).items():
        cfg = builtin()
        part(cfg)
        out[name] = toml_dumps(cfg)
    every = builtin()
    for part in parts(reply).values():
        part(every)
    out["all three"] = toml_dumps(every)
    out["bench config"] = bench_config(1, reply)
    return out


async def row(server: Server, name: str, args: argparse.Namespace) -> dict[str, Any]:
    if name == "requests":
        return await requests(server, args.requests, 16, 32)
    return await streams(server, 100, TOKENS, 1)


def cell(xs: list[float], base: float, fmt: str) -> str:
    med = statistics.median(xs)
    return (f"{fmt.format(med)} ({fmt.format(min(xs))}–{fmt.format(max(xs))}), "
            f"{(med / base - 1) * 100:+.0f}%")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rows", default="requests,steady")
    args = ap.parse_args()
    rows = args.rows.split(",")
    tmp = Path(tempfile.mkdtemp())
    pin_self(1)
    servers: dict[str, Server] = {}
    procs: list[Any] = []
    try:
        for name, text in variants().items():
            path = tmp / f"{name.replace(' ', '-')}.toml"
            path.write_text(text)
            proc, servers[name] = serve(path, 0, tmp)
            procs.append(proc)
            await streams(servers[name], 20, 200, 1)  # warm-up
        got: dict[str, dict[str, list[dict[str, Any]]]] = {r: {n: [] for n in servers}
                                                           for r in rows}
        for _ in range(args.repeat):
            for r in rows:
                for name, server in servers.items():
                    result = await row(server, r, args)
                    got[r][name].append(result)
                    print(f"  {r:<8} {name:<13} {result['cpu_us']:.2f} µs", flush=True)
    finally:
        stop(*procs)
    titles = {"requests": "CPU µs per request", "steady": "CPU µs per token (streams at once)"}
    print("| config | " + " | ".join(titles[r] for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    base = {r: statistics.median(x["cpu_us"] for x in got[r]["built-in"]) for r in rows}
    for name in servers:
        cells = []
        for r in rows:
            xs = [x["cpu_us"] for x in got[r][name]]
            text = cell(xs, base[r], "{:.0f}" if r == "requests" else "{:.2f}")
            if r == "steady":
                text += f" ({statistics.median(x['mean_active'] for x in got[r][name]):.0f})"
            cells.append(text)
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    asyncio.run(main())
