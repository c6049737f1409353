"""The streaming hot path against a bare ASGI app, per protocol and ``stream_interval``.

For Chat SSE, Responses SSE, the Responses websocket and Anthropic SSE, at ``stream_interval``
1 and 8 (``[tiers.spark] stream_interval``), on the spark tier (~1,150 tok/s per stream):

* capacity: N concurrent streams of ``--tokens`` tokens, N doubling, then bisected; a level
  is *held* when every stream gets at least 95% of its modeled rate and the median is within
  2% of it (rates from the client's arrival times against the stream's own modeled
  ``time_info``). Reported: the largest N held, events/s there, and at ``--ref`` streams (2x that at interval 8: a load
  one core carries without saturating, so CPU per token means cost, not 1/throughput) the
  server's CPU per token;
* the same for the bare reference (``bench/bare_asgi.py``): one stream of each kind recorded
  from fastmode is replayed, byte for byte, at the same pace, with nothing else. The ratio of
  CPU per token is fastmode's cost over the stack's physical limit. Both servers run at once
  and each level is measured on one, then the other, so both see the machine in one state;
* first-token latency added by the gateway: a client's time to the first token event minus the
  modeled time of that event (``time_info``: queue + prefill, plus the interval's wait), p50
  and p99 over sequential requests on an idle server.

Every reply is the same ``--tokens`` tokens of the mock model's prose, served through a
``[[scripts]]`` rule so that all protocols stream identical text (the Messages API has no
``ignore_eos``); the mock model's own prose generation costs extra per token, measured here and
printed on its own line. The server runs on one core and this client on another (``taskset``
semantics via ``sched_setaffinity``). Loopback only; every wait is bounded.

Usage: python bench/gateway_overhead.py [--quick] [--tokens N] [--ref N] [--max N]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import orjson

from bench.harness import (
    ROOT,
    cores,
    cpu_seconds,
    free_port,
    pin_self,
    run_client,
    start_pinned,
    stop,
    toml_dumps,
    wait_healthy,
)
from bench.stream_client import PROTOCOLS, Proto, capture, stream

PY = sys.executable
PROMPT = "fastmode-bench: stream the scripted reply"
INTERVALS = [1, 8]
LEVEL_TIMEOUT_S = 180.0


def bench_config(interval: int, reply: str, trace: bool = False) -> str:
    """The built-in config with room for thousands of spark streams, so that the gateway, not
    the modeled engine, is what saturates; ``stream_interval`` on the spark tier. One spark
    replica: the bare app paces every stream with one timer, and so does one replica (each
    replica more is one more timer wake per step: an engine cost, the same for one stream or
    a thousand, see docs/streaming.md)."""
    cfg = tomllib.loads((ROOT / "fastmode/gateway/data/default.toml").read_text())
    spark = cfg["deployments"]["spark"]
    spark.update(max_batch=4096, max_waiting=4096, replicas=1)
    cfg["fleet"]["policy"] = "static"  # no replica moved while the bench runs
    others = cfg["tiers"]["spark"].get("tenants") or spark.get("background")
    if others is not None:  # the other tenants: a few, so the bench's streams fit the batch
        others["occupancy"] = 0.01
    if interval != 1:  # 1 is the default
        cfg["tiers"]["spark"]["stream_interval"] = interval
    server = cfg.setdefault("server", {})
    server.update(ws_max_connections=100_000, ws_max_connections_per_key=100_000)
    if trace:  # every request's ground truth recorded (gateway.tracing): its cost on the path
        server.update(trace_all=True)
    script(cfg, reply)
    return toml_dumps(cfg)


def script(cfg: dict[str, Any], reply: str) -> None:
    """``cfg`` with ``reply`` scripted for the benchmarks' prompt (``PROMPT``): nothing is
    generated per request."""
    cfg["scripts"] = [{"match": "^fastmode-bench:", "reply": reply}]


def prose(tokens: int) -> tuple[str, float]:
    """``tokens`` tokens of the mock model's prose, and what generating it costs per token."""
    from fastmode.backends.mockmodel import GenerationRequest, generate

    def req(seed: int) -> GenerationRequest:
        return GenerationRequest(messages=[{"role": "user", "content": f"hello {seed}"}],
                                 max_tokens=tokens, ignore_eos=True, seed=seed)

    gen = generate(req(1))
    t0 = time.perf_counter()
    for seed in range(20):
        generate(req(seed))
    per_token = (time.perf_counter() - t0) / 20 / tokens
    return gen.text, per_token


# -- one level: N concurrent streams ------------------------------------------------------------

def rate_ratio(r: dict[str, Any], interval: int) -> float:
    """Received tokens/s over the modeled rate, after the first 10% of tokens (the start of a
    level is a burst of request parsing: that is TTFT, not streaming rate). The modeled rate
    is the model's alone: ``time_info`` without the host lag the replica slipped by
    (``completion_host_lag_time``), so a host that could not keep up shows as a slower
    stream, not as a model that was slower."""
    series, info, n = r["series"], r["info"], int(r["tokens"])
    if not info or n < 20 or info.get("completion_time", 0) <= 0 or not series:
        return 0.0
    cum = 0
    marks: list[tuple[float, int]] = []
    for t, events in series:
        cum += events
        marks.append((t, min(cum * interval, n)))
    k = next(i for i, (_, c) in enumerate(marks) if c >= n // 10)
    (t0, c0), (t1, c1) = marks[k], marks[-1]
    if t1 <= t0:
        return 0.0
    modeled = float(info["completion_time"]) - float(info.get("completion_host_lag_time", 0.0))
    return ((c1 - c0) / (t1 - t0)) / ((n - 1) / modeled)


async def level(port: int, pid: int, proto: Proto, n: int, tokens: int, interval: int,
                path: str | None = None) -> dict[str, Any]:
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    results = await asyncio.wait_for(asyncio.gather(*(
        stream(port, proto, PROMPT, tokens, path) for _ in range(n))), LEVEL_TIMEOUT_S)
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    got = sum(r["tokens"] for r in results)
    events = sum(e for r in results for _, e in r["series"])
    rates = sorted(rate_ratio(r, interval) for r in results)
    worst, median = rates[0], statistics.median(rates)
    held = worst >= 0.95 and abs(median - 1.0) <= 0.02 and got == n * tokens
    return {"streams": n, "held": held, "worst": worst, "median": median,
            "events_per_s": events / wall, "tokens": got, "cpu_s": cpu, "wall_s": wall,
            "cpu_us_per_token": cpu / max(got, 1) * 1e6, "core_share": cpu / wall}


class Server:
    """One server under test: where it listens, its pid (for CPU time), its path per stream."""

    def __init__(self, name: str, port: int, pid: int, paths: dict[str, str] | None) -> None:
        self.name, self.port, self.pid, self.paths = name, port, pid, paths

    async def level(self, key: str, proto: Proto, n: int, tokens: int,
                    interval: int) -> dict[str, Any]:
        path = self.paths[key] if self.paths else None
        row = await level(self.port, self.pid, proto, n, tokens, interval, path)
        print(f"    {self.name:<9} {proto.label:<20} interval {interval} n={n:<5} "
              f"worst {row['worst']:6.1%} median {row['median']:6.1%} "
              f"{row['events_per_s']:9.0f} events/s {row['cpu_us_per_token']:6.2f} us/token "
              f"({row['core_share']:4.0%} of a core){'' if row['held'] else '  NOT HELD'}",
              flush=True)
        return row


async def sweep(servers: list[Server], key: str, proto: Proto, tokens: int, interval: int,
                ref: int, top: int, retries: int, repeat: int = 1,
                refine: int = 0) -> dict[str, dict[str, Any]]:
    """N = ref/4, ref/2, ref, 2 ref... on each server in turn at every N (so that both see the
    same machine at nearly the same moment), until a server fails a level at or past ``ref``
    (``retries`` more tries first: on a shared machine one bad second fails a level); then
    ``refine`` bisections (geometric) between each server's largest N held and the N it
    failed, so that "streams held" is the capacity within ~10%, not a power of two."""
    rows: dict[str, dict[int, dict[str, Any]]] = {s.name: {} for s in servers}
    going = list(servers)
    k = -2
    while going and (n := max(1, int(ref * 2.0 ** k))) <= top:
        k += 1
        for server in list(going):
            row = await server.level(key, proto, n, tokens, interval)
            for _ in range(retries if n >= ref else 0):
                if row["held"]:
                    break
                row = await server.level(key, proto, n, tokens, interval)
            rows[server.name][n] = row
            if not row["held"] and n >= ref:
                going.remove(server)
        if n == ref and repeat > 1:  # CPU per token where it is compared: the median of
            runs = {s.name: [rows[s.name][n]["cpu_us_per_token"]] for s in servers}
            for _ in range(repeat - 1):  # `repeat` runs, the servers in turn each time
                for server in servers:
                    again = await server.level(key, proto, n, tokens, interval)
                    runs[server.name].append(again["cpu_us_per_token"])
            for server in servers:
                rows[server.name][n]["cpu_us_per_token"] = statistics.median(runs[server.name])
    for server in servers:
        await bisect(server, rows[server.name], key, proto, tokens, interval, retries, refine)
    out = {}
    for name, levels in rows.items():
        held = [r for r in levels.values() if r["held"]]
        out[name] = {"rows": levels, "ref": levels.get(ref),
                     "best": max(held, key=lambda r: r["streams"]) if held else None}
    return out


async def bisect(server: Server, levels: dict[int, dict[str, Any]], key: str, proto: Proto,
                 tokens: int, interval: int, retries: int, probes: int) -> None:
    """Narrow the capacity down between the largest N held and the smallest N failed above it
    (each probe with the sweep's retries); the probes' rows join ``levels``."""
    held = [n for n, r in levels.items() if r["held"]]
    if not held:
        return
    lo = max(held)
    failed = [n for n, r in levels.items() if not r["held"] and n > lo]
    if not failed:
        return  # held up to the largest N tried
    hi = min(failed)
    for _ in range(probes):
        mid = round(math.sqrt(lo * hi))
        if mid in (lo, hi):
            break
        row = await server.level(key, proto, mid, tokens, interval)
        for _ in range(retries):
            if row["held"]:
                break
            row = await server.level(key, proto, mid, tokens, interval)
        levels[mid] = row
        lo, hi = (mid, hi) if row["held"] else (lo, mid)


async def first_token(port: int, proto: Proto, interval: int, samples: int) -> list[float]:
    """Client-observed time to the first token event minus its modeled time, seconds."""
    out = []
    for _ in range(samples):
        r = await stream(port, proto, PROMPT, 64, None)
        info = r["info"]
        if not info or not r["series"] or r["tokens"] < 2:
            continue
        itl = info["completion_time"] / (r["tokens"] - 1)
        modeled = info["queue_time"] + info["prompt_time"] + (min(interval, r["tokens"]) - 1) * itl
        out.append(r["series"][0][0] - r["t_send"] - modeled)
    return sorted(out)


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else float("nan")


# -- the run ------------------------------------------------------------------------------------

def ref_for(args: argparse.Namespace, interval: int) -> int:
    """Where CPU per token is compared: a load one core carries without saturating, so that
    the figure is a cost, not 1/throughput (twice the streams when events carry several
    tokens: per-request work, not events, then fills the core)."""
    return int(args.ref) * min(interval, 2)


async def run_interval(args: argparse.Namespace, interval: int, reply: str,
                       server_core: int | None, results: dict[Any, Any]) -> None:
    """fastmode with ``stream_interval`` = interval, and the bare app replaying its streams."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "bench.toml"
        cfg.write_text(bench_config(interval, reply, args.trace))
        port = free_port()
        procs = [start_pinned([PY, "-m", "fastmode", "serve", "--port", str(port), "--config",
                               str(cfg), "--ledger", str(Path(tmp) / "ledger.sqlite3"),
                               "--log-level", "warning"], server_core)]
        try:
            wait_healthy(port, procs[0])
            fast = Server("fastmode", port, procs[0].pid, None)
            captures: dict[str, Any] = {}
            for key, proto in PROTOCOLS.items():
                await stream(port, proto, PROMPT, 50, None)  # warm-up
                captures[key] = await capture(port, proto, PROMPT, args.tokens, interval)
            path = Path(tmp) / "captures.json"
            path.write_bytes(orjson.dumps(captures))
            itl = statistics.median(c["itl"] for c in captures.values())
            bare_port = free_port()
            procs.append(start_pinned([PY, str(ROOT / "bench/bare_asgi.py"), str(bare_port),
                                       str(path), repr(itl)], server_core))
            wait_healthy(bare_port, procs[1])
            bare = Server("bare", bare_port, procs[1].pid, {k: "/" + k for k in PROTOCOLS})
            for key, proto in PROTOCOLS.items():
                ttft = await first_token(port, proto, interval, args.ttft_samples)
                rows = await sweep([fast, bare], key, proto, args.tokens, interval,
                                   ref_for(args, interval), args.max, args.retries, args.repeat,
                                   args.refine)
                results[("fastmode", key, interval)] = {**rows["fastmode"], "ttft": ttft}
                results[("bare", key, interval)] = rows["bare"]
        finally:
            stop(*procs)


def table(results: dict[Any, Any], args: argparse.Namespace) -> list[str]:
    lines = [
        "| protocol | interval | streams held (fastmode / bare) | events/s at the largest held "
        "| streams compared | CPU µs/token: fastmode / bare | ratio | first token added "
        "p50 / p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, proto in PROTOCOLS.items():
        for interval in INTERVALS:
            f, b = results[("fastmode", key, interval)], results[("bare", key, interval)]
            fb, bb = f["best"], b["best"]
            fr, br = f["ref"], b["ref"]
            ratio = fr["cpu_us_per_token"] / br["cpu_us_per_token"] if fr and br else float("nan")
            ttft = f["ttft"]
            lines.append(
                f"| {proto.label} | {interval} | {fb['streams'] if fb else 0} / "
                f"{bb['streams'] if bb else 0} | {fb['events_per_s'] if fb else 0:,.0f} | "
                f"{ref_for(args, interval)} | "
                f"{fr['cpu_us_per_token'] if fr else float('nan'):.2f} / "
                f"{br['cpu_us_per_token'] if br else float('nan'):.2f} | {ratio:.2f}× | "
                f"{pct(ttft, 0.5) * 1e3:.2f} / {pct(ttft, 0.99) * 1e3:.2f} ms |")
    return lines


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter streams, fewer levels")
    ap.add_argument("--trace", action="store_true",
                    help="the server records every request's trace (serve --trace)")
    ap.add_argument("--tokens", type=int, default=None, help="tokens per stream")
    ap.add_argument("--ref", type=int, default=None,
                    help="streams at which CPU per token is compared")
    ap.add_argument("--max", type=int, default=None, help="largest N tried")
    ap.add_argument("--ttft-samples", type=int, default=None)
    ap.add_argument("--intervals", type=int, nargs="+", default=INTERVALS)
    ap.add_argument("--repeat", type=int, default=None,
                    help="runs of the compared level, median CPU per token (default 1 quick, 3)")
    ap.add_argument("--refine", type=int, default=None,
                    help="bisections of the capacity past the doubling (default 2 quick, 3)")
    ap.add_argument("--retries", type=int, default=None,
                    help="more tries of a level that failed (default: 0 quick, 1 full)")
    args = ap.parse_args()
    INTERVALS[:] = args.intervals
    args.tokens = args.tokens or (400 if args.quick else 1000)
    args.ref = args.ref or 50
    args.max = args.max or (400 if args.quick else 6400)
    args.ttft_samples = args.ttft_samples or (15 if args.quick else 60)
    if args.retries is None:
        args.retries = 0 if args.quick else 1
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.refine is None:
        args.refine = 2 if args.quick else 3
    cpus = cores()
    server_core, client_core = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    pin_self(client_core)
    print(f"server on core {server_core}, client on core {client_core}; {args.tokens} tokens "
          f"per stream", flush=True)
    reply, gen_cost = prose(args.tokens + 50)
    results: dict[Any, Any] = {}
    started = time.perf_counter()
    for interval in INTERVALS:
        print(f"stream_interval = {interval}: fastmode, then the bare app replaying its streams "
              "(the same events at the same pace), level by level", flush=True)
        await run_interval(args, interval, reply, server_core, results)
    print(f"\nsummary ({time.perf_counter() - started:.0f} s)")
    for line in table(results, args):
        print(line)
    print(f"\nmock prose generation (not in the figures above: replies are scripted): "
          f"{gen_cost * 1e6:.2f} us/token")


if __name__ == "__main__":
    run_client(main)
