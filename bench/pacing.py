"""Pacing and cost, fastmode beside the bare ASGI app in one run: one table.

Each row is measured on both servers in turn (fastmode, bare, fastmode, bare... ``--repeat``
times), so both see the machine in the same state; the table gives the median and the range.
The server is pinned to one core, this client (raw sockets, ``stream_client.py``: not fastmode's
code path) to the other. The rows, all Chat Completions SSE on the spark tier (~1,150 tok/s):

- ``steady``: 100 streams x 1,000 tokens at one event per token: each stream's rate after its
  first 10% of tokens against its modeled rate (fastmode: its own ``time_info``; the bare app:
  the inter-token latency it replays), slowest..fastest, and server CPU per token delivered;
- ``burst``: 200 streams at once (more than one core carries at one event per token): the same,
  and the fewest socket reads a stream's tokens came in (a catch-up burst shows as few reads);
- ``interval8``: 200 streams with ``stream_interval = 8``: rates and CPU per token;
- ``requests``: 3,000 streams of 16 tokens, 32 at a time: server CPU per request;
- ``lone``: one user on the built-in config, ``--lone`` requests of 300 tokens in a row on
  ``/fast/v1`` then on ``/v1``: tokens/s p10..p90 (fastmode only: the modeled speed itself).

What it runs on (``--config``): ``built-in`` (the default) is the config a user gets from
``make serve`` — two spark replicas, the other tenants at half the batch, the proportional
fleet — and every reply is the mock model's own prose (``ignore_eos`` holds each stream to
``--tokens``); only ``stream_interval`` is set for the interval-8 row. ``bench`` is the second
column that isolates the gateway: one spark replica with room for thousands of streams, the
other tenants at 1%, a static fleet and a scripted reply (``gateway_overhead.bench_config``).
On the built-in config more streams than the engine's free slots wait in its queue: each
stream's rate is still judged against its own modeled times, and the bare app replays that
seating (``--bare-schedule fastmode``, the default): each of its streams starts as late as
fastmode's stream of the same rank did in the run before, so both carry the same streams at
once (the table's ``streams streaming at once`` line) and a fixed cost per engine step is
spread over the same tokens. ``--bare-schedule at-once`` starts every bare stream at once.

fastmode's rates are against the model's own pace: ``time_info`` without the host lag the
replica slipped by (``completion_host_lag_time``, docs/streaming.md), so a host that could not
keep up shows as a slower stream; the ``host lag`` column is what ``fastmode_host_lag_seconds``
counted during the row (slips, seconds in all). On pace: rates near 100%, no host lag.

Usage: python bench/pacing.py [--rows steady,burst,...] [--repeat N] [--tokens N] [--lone N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.gateway_overhead import bench_config, prose, rate_ratio
from bench.harness import (
    ROOT,
    cores,
    cpu_split,
    free_port,
    pin_self,
    run_client,
    start_pinned,
    stop,
    toml_dumps,
    wait_healthy,
)
from bench.seating import first_tokens, held_paths, mean_active
from bench.stream_client import PROTOCOLS, Proto, capture, chat_final, stream, user_messages

PY = sys.executable
PROMPT = "fastmode-bench: stream the scripted reply"  # scripted on the bench config only
# the mock model's prose held to the asked length (the built-in config scripts nothing)
CHAT = Proto("Chat SSE", "/v1/chat/completions", False, PROTOCOLS["chat"].marker,
             lambda p, n: {**PROTOCOLS["chat"].body(p, n), "ignore_eos": True},
             PROTOCOLS["chat"].final)
CONFIGS = ("built-in", "bench")
ROWS = ("steady", "burst", "interval8", "requests", "lone")
TIERS = ("spark", "fast", "standard")


def modeled_rates() -> dict[str, float]:
    """A lone user's modeled tok/s per tier of the built-in config, as ``fastmode predict
    --tier T --json`` gives it (asked at run time: a refit of the profiles moves them)."""
    out = {}
    for tier in TIERS:
        raw = subprocess.run([PY, "-m", "fastmode", "predict", "--tier", tier, "--json"],
                             cwd=ROOT, check=True, capture_output=True).stdout
        out[tier] = float(orjson.loads(raw)["output_tokens_per_s_per_user"])
    return out


async def metric_sum(port: int, name: str) -> tuple[float, float]:
    """(count, sum) of a histogram on ``/metrics``, every label summed (0, 0 if absent)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n")
    raw = await reader.read(-1)
    writer.close()
    count = total = 0.0
    for line in raw.decode(errors="replace").splitlines():
        if line.startswith(name + "_count"):
            count += float(line.rsplit(" ", 1)[1])
        elif line.startswith(name + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
    return count, total


class Server:
    """A server under test: its port, its pid (CPU time), how it is asked for a stream."""

    def __init__(self, name: str, port: int, pid: int, path: str | None) -> None:
        self.name, self.port, self.pid, self.path = name, port, pid, path

    def cpu(self) -> tuple[float, float]:
        """(all, system) CPU seconds the server has used so far: its process's, in clock
        ticks (a server that runs in more than one process or thread measures them all)."""
        user, system = cpu_split(self.pid)
        return user + system, system

    async def lag(self) -> tuple[float, float]:
        """Slips so far and the seconds they added (the bare app's ticker slips by the same
        rule and serves its own count)."""
        return await metric_sum(self.port, "fastmode_host_lag_seconds")


async def streams(server: Server, n: int, tokens: int, interval: int,
                  schedule: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """``n`` concurrent streams: rates (x modeled), CPU per token, fewest reads, host lag.

    ``schedule`` carries fastmode's seating to the bare app: fastmode's run stores when each of
    its streams got its first token (the engine seats so many at a time, the rest wait in its
    queue); the bare app's next run holds its streams as long, so both servers carry the same
    concurrent streams. ``mean_active``: how many streams were streaming at once, on average."""
    lag0 = await server.lag()
    starts = schedule.get("starts") if schedule is not None and server.path else None
    paths = (held_paths(server.path, starts, n) if server.path else [None] * n)
    (c0, k0), t0, own = server.cpu(), time.perf_counter(), time.process_time()
    results = await asyncio.wait_for(asyncio.gather(*(
        stream(server.port, CHAT, PROMPT, tokens, p) for p in paths)), 300)
    (c1, k1), wall = server.cpu(), time.perf_counter() - t0
    if schedule is not None and not server.path:
        schedule["starts"] = first_tokens(results)
    cpu = c1 - c0
    lag1 = await server.lag()
    got = sum(r["tokens"] for r in results)
    served = [r for r in results if r["series"]]  # a refused request (503) has no tokens
    rates = sorted(rate_ratio(r, interval) for r in served) or [0.0]
    return {"slowest": rates[0], "fastest": rates[-1], "median": statistics.median(rates),
            "cpu_us": cpu / max(got, 1) * 1e6, "sys_us": (k1 - k0) / max(got, 1) * 1e6,
            "reads": min((len(r["series"]) for r in served), default=0),
            "refused": len(results) - len(served),
            "complete": got == len(served) * tokens, "wall": wall,
            "slips": lag1[0] - lag0[0], "lag_s": lag1[1] - lag0[1],
            "mean_active": mean_active(results),
            "server_core": cpu / wall, "client_core": (time.process_time() - own) / wall}


async def requests(server: Server, total: int, tokens: int, concurrency: int) -> dict[str, Any]:
    """``total`` short streams, ``concurrency`` at a time: server CPU per request."""
    left = [total]
    got = [0]

    async def user() -> None:
        while left[0] > 0:
            left[0] -= 1
            r = await stream(server.port, CHAT, PROMPT, tokens, server.path)
            got[0] += r["tokens"]

    (c0, k0), t0 = server.cpu(), time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(user() for _ in range(concurrency))), 600)
    (c1, k1), wall = server.cpu(), time.perf_counter() - t0
    cpu = c1 - c0
    return {"cpu_us": cpu / total * 1e6, "sys_us": (k1 - k0) / total * 1e6,
            "complete": got[0] == total * tokens,
            "per_s": total / wall}


def schedule(args: argparse.Namespace) -> dict[str, list[float]] | None:
    """A row's shared schedule (``streams``), or None with ``--bare-schedule at-once``."""
    return {} if args.bare_schedule == "fastmode" else None


def chat_to(model: str) -> Proto:
    return Proto("Chat SSE", "/v1/chat/completions", False, CHAT.marker,
                 lambda p, n: {"model": model, "stream": True, "max_tokens": n,
                               "stream_options": {"include_usage": True},
                               "messages": user_messages(p)}, chat_final)


async def lone(port: int, path: str, k: int, tokens: int = 300) -> list[float]:
    """One user's requests in a row: client-measured tokens/s of each (first to last token)."""
    out = []
    for _ in range(k):
        r = await stream(port, chat_to("frontier"), "write about the sea in detail", tokens,
                         path)
        s = r["series"]
        events = sum(e for _, e in s) - s[0][1]
        if events > 0 and s[-1][0] > s[0][0]:
            out.append(events / (s[-1][0] - s[0][0]))
    return sorted(out)


# -- servers --------------------------------------------------------------------------------

def serve(cfg: Path | None, core: int | None, tmp: Path) -> tuple[Any, Server]:
    port = free_port()
    argv = [PY, "-m", "fastmode", "serve", "--port", str(port), "--ledger",
            str(tmp / f"ledger-{port}.sqlite3"), "--log-level", "warning"]
    proc = start_pinned(argv + (["--config", str(cfg)] if cfg else []), core)
    wait_healthy(port, proc)
    return proc, Server("fastmode", port, proc.pid, None)


def builtin_config(interval: int, tmp: Path) -> Path | None:
    """The built-in config as ``make serve`` runs it (``None``), or with ``stream_interval``
    on the spark tier and nothing else changed."""
    if interval == 1:
        return None
    cfg = tomllib.loads((ROOT / "fastmode/gateway/data/default.toml").read_text())
    cfg["tiers"]["spark"]["stream_interval"] = interval
    path = tmp / f"built-in-{interval}.toml"
    path.write_text(toml_dumps(cfg))
    return path


def start_fastmode(interval: int, core: int | None, tmp: Path, config: str = "built-in",
                   reply: str = "") -> tuple[Any, Server]:
    """fastmode at ``interval`` on ``config`` (``CONFIGS``; ``reply``: the bench config's
    scripted reply), pinned to ``core``, healthy."""
    if config == "bench":
        cfg: Path | None = tmp / f"bench-{interval}.toml"
        assert cfg is not None
        cfg.write_text(bench_config(interval, reply))
    else:
        cfg = builtin_config(interval, tmp)
    return serve(cfg, core, tmp)


async def record(fast: Server, interval: int, tokens: int, tmp: Path) -> tuple[Path, float]:
    """fastmode's streams recorded for the bare app to replay: a ``long`` one of ``tokens``
    tokens and a ``short`` one of 16, written to a captures file; the file and the long
    stream's modeled inter-token latency (the pace the bare app replays at)."""
    await stream(fast.port, CHAT, PROMPT, 50, None)  # warm-up
    caps = {"long": await capture(fast.port, CHAT, PROMPT, tokens, interval),
            "short": await capture(fast.port, CHAT, PROMPT, 16, interval)}
    path = tmp / f"captures-{interval}.json"
    path.write_bytes(orjson.dumps(caps))
    return path, float(caps["long"]["itl"])


def start_bare(captures: Path, itl: float, core: int | None,
               server: str = "uvicorn") -> tuple[Any, int]:
    """``bench/bare_asgi.py`` replaying ``captures`` at ``itl`` under ``server`` (uvicorn or
    granian), pinned to ``core``, healthy: its process and port."""
    port = free_port()
    proc = start_pinned([PY, str(ROOT / "bench/bare_asgi.py"), str(port), str(captures),
                         repr(itl), "--server", server], core)
    try:
        wait_healthy(port, proc)
    except RuntimeError:
        stop(proc)
        raise
    return proc, port


async def pair(interval: int, reply: str, tokens: int, core: int | None, tmp: Path,
               procs: list[Any], config: str = "built-in") -> tuple[Server, Server]:
    """fastmode at ``interval`` on ``config`` and the bare app replaying its recorded
    streams."""
    proc, fast = start_fastmode(interval, core, tmp, config, reply)
    procs.append(proc)
    path, itl = await record(fast, interval, tokens, tmp)
    bare, bare_port = start_bare(path, itl, core)
    procs.append(bare)
    return fast, Server("bare", bare_port, bare.pid, "/long")


async def interleaved(servers: tuple[Server, Server], repeat: int,
                      run: Callable[[Server], Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
    for _ in range(repeat):
        for server in servers:
            row = await run(server)
            out[server.name].append(row)
            print(f"    {server.name:<8} {row}", flush=True)
    return out


# -- the table ------------------------------------------------------------------------------

def span(rows: list[dict[str, Any]], key: str, fmt: str, scale: float = 1.0) -> str:
    xs = sorted(r[key] * scale for r in rows)
    med = statistics.median(xs)
    return (fmt.format(med) if len(xs) == 1 or xs[0] == xs[-1]
            else f"{fmt.format(med)} ({fmt.format(xs[0])}–{fmt.format(xs[-1])})")


def rates(rows: list[dict[str, Any]]) -> str:
    lo = min(r["slowest"] for r in rows) * 100
    hi = max(r["fastest"] for r in rows) * 100
    return f"{lo:.1f}%..{hi:.1f}%"


def lag(rows: list[dict[str, Any]]) -> str:
    return " / ".join(f"{r['slips']:.0f} ({r['lag_s'] * 1e3:.0f} ms)" for r in rows)


def kernel_row(label: str, f: list[dict[str, Any]], b: list[dict[str, Any]], fmt: str) -> str:
    """The system-time share of a CPU row: the kernel's socket writes, the same for both
    servers (one write per event), so what the ratio leaves is the user-space difference."""
    return f"| {label} | {span(f, 'sys_us', fmt)} | {span(b, 'sys_us', fmt)} | | |"


def table(res: dict[str, Any], args: argparse.Namespace) -> list[str]:
    out = ["| row | fastmode | bare ASGI app | ratio | host lag per run, fastmode / bare: slips "
           "(time) |", "|---|---|---|---|---|"]
    for key, label in (("steady", "100 streams, interval 1"),
                       ("burst", "200 streams, interval 1"),
                       ("interval8", "200 streams, interval 8")):
        if key not in res:
            continue
        f, b = res[key]["fastmode"], res[key]["bare"]
        ratio = statistics.median(r["cpu_us"] for r in f) / statistics.median(
            r["cpu_us"] for r in b)
        out.append(f"| {label}: slowest..fastest of modeled | {rates(f)} | {rates(b)} | | "
                   f"{lag(f)} / {lag(b)} |")
        refused = [r.get("refused", 0) for r in f]
        if any(refused):
            out.append(f"| {label}: refused by the engine per run (503, queue full; the bare "
                       f"app then streams only those served) | "
                       f"{' / '.join(map(str, refused))} | | | |")
        out.append(f"| {label}: server CPU µs/token | {span(f, 'cpu_us', '{:.2f}')} | "
                   f"{span(b, 'cpu_us', '{:.2f}')} | {ratio:.2f}× | |")
        out.append(kernel_row(f"{label}: of which the kernel's (system time)", f, b, "{:.2f}"))
        out.append(f"| {label}: streams streaming at once (mean) | "
                   f"{span(f, 'mean_active', '{:.0f}')} | {span(b, 'mean_active', '{:.0f}')} "
                   "| | |")
        if key == "burst":
            out.append(f"| {label}: fewest reads of a stream's {args.tokens} tokens | "
                       f"{min(r['reads'] for r in f)} | {min(r['reads'] for r in b)} | | |")
    modeled = modeled_rates() if {"steady", "interval8", "lone"} & set(res) else {}
    for key, interval in (("steady", 1), ("interval8", 8)):  # what one core carries
        if key in res:
            cells = []
            for name in ("fastmode", "bare"):
                cpu = statistics.median(r["cpu_us"] for r in res[key][name]) * 1e-6
                cells.append(" / ".join(f"{1 / (cpu * rate):,.0f}" for rate in modeled.values()))
            out.append(f"| streams one core carries at interval {interval} "
                       f"({' / '.join(f'{t} {r:,.1f} tok/s' for t, r in modeled.items())}: "
                       "1 core / (CPU per token x modeled tok/s)) | "
                       f"{cells[0]} | {cells[1]} | | |")
    if "requests" in res:
        f, b = res["requests"]["fastmode"], res["requests"]["bare"]
        ratio = statistics.median(r["cpu_us"] for r in f) / statistics.median(
            r["cpu_us"] for r in b)
        out.append(f"| {args.requests} streams of 16 tokens, 32 at a time: server CPU µs per "
                   f"request | {span(f, 'cpu_us', '{:.0f}')} | {span(b, 'cpu_us', '{:.0f}')} | "
                   f"{ratio:.2f}× | |")
        out.append(kernel_row("the same: of which the kernel's (system time)", f, b, "{:.0f}"))
    if "lone" in res:
        fast, std = res["lone"]
        std50 = statistics.median(std)

        def q(xs: list[float], p: float) -> float:
            return xs[round(p * (len(xs) - 1))]

        predicted = modeled["fast"]
        out.append(f"| one user, {len(fast)} requests of 300 tokens: fast tok/s p10..p90 "
                   f"(x standard's median {std50:.1f}; `predict` {predicted:.1f}, p10..p90 "
                   f"{q(fast, .1) / predicted - 1:+.1%}..{q(fast, .9) / predicted - 1:+.1%}) | "
                   f"{q(fast, .1):.1f}..{q(fast, .9):.1f} "
                   f"({q(fast, .1) / std50:.2f}×..{q(fast, .9) / std50:.2f}×; max "
                   f"{fast[-1] / std50:.2f}×) | – | | |")
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--repeat", type=int, default=2, help="runs per server, interleaved")
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--lone", type=int, default=20, help="requests per tier of the lone user")
    ap.add_argument("--bare-schedule", choices=("fastmode", "at-once"), default="fastmode",
                    help="fastmode: the bare app's streams start when fastmode's did (the same "
                    "concurrent streams); at-once: every stream starts at once")
    ap.add_argument("--config", choices=CONFIGS, default="built-in",
                    help="built-in: what `make serve` runs, the mock model's prose; bench: one "
                    "spark replica, tenants at 1%%, a scripted reply (isolates the gateway)")
    args = ap.parse_args()
    rows = args.rows.split(",")
    cpus = cores()
    server_core, client_core = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    pin_self(client_core)
    reply, _ = prose(args.tokens + 50)
    res: dict[str, Any] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        procs: list[Any] = []
        try:
            if {"steady", "burst", "requests"} & set(rows):
                both = await pair(1, reply, args.tokens, server_core, tmp, procs, args.config)
                for key, n in (("steady", 100), ("burst", 200)):
                    if key in rows:
                        print(f"{key}: {n} streams x {args.tokens} tokens, interval 1")
                        seats = schedule(args)

                        def run(s: Any, n: int = n, seats: Any = seats) -> Any:
                            return streams(s, n, args.tokens, 1, seats)

                        res[key] = await interleaved(both, args.repeat, run)
                if "requests" in rows:
                    print(f"requests: {args.requests} x 16 tokens, 32 at a time")
                    both[1].path = "/short"
                    res["requests"] = await interleaved(
                        both, args.repeat, lambda s: requests(s, args.requests, 16, 32))
                stop(*procs)
                procs.clear()
            if "interval8" in rows:
                both = await pair(8, reply, args.tokens, server_core, tmp, procs, args.config)
                print(f"interval8: 200 streams x {args.tokens} tokens, interval 8")
                seats8 = schedule(args)
                res["interval8"] = await interleaved(
                    both, args.repeat, lambda s: streams(s, 200, args.tokens, 8, seats8))
                stop(*procs)
                procs.clear()
            if "lone" in rows:
                proc, fast = serve(None, server_core, tmp)
                procs.append(proc)
                print(f"lone: {args.lone} requests on /fast/v1, then on /v1")
                res["lone"] = (await lone(fast.port, "/fast/v1/chat/completions", args.lone),
                               await lone(fast.port, "/v1/chat/completions", args.lone))
        finally:
            stop(*procs)
    ran_on = ("the built-in config, the mock model's prose" if args.config == "built-in" else
              "the bench config: one spark replica, tenants at 1%, a scripted reply")
    print(f"\nsummary on {ran_on} ({time.perf_counter() - started:.0f} s; server on core "
          f"{server_core}, "
          f"client on core {client_core}; median (range) of {args.repeat} runs each)")
    for line in table(res, args):
        print(line)


if __name__ == "__main__":
    run_client(main)
