"""What a Prometheus scrape does to streams: ``/metrics`` scraped while spark streams run.

A scrape is written on the event loop, so while it is written no stream moves; a replica whose
step is served late slips (docs/streaming.md), and the host-lag metric counts it. This runs
``fastmode serve`` on its built-in config (16 engines: the default ``/metrics`` is ~3,000
lines), pinned to one core, and on the other core:

- ``--scrapes`` scrapes back to back with nothing else running: the server-side time of one, as
  the client sees it (request sent to last byte read; median and max);
- ``--streams`` spark streams of ``--tokens`` tokens (Chat SSE, one event per token) twice, once
  alone and once with a scrape every ``--every`` seconds: the slowest and median stream's rate
  against its modeled rate, and the slips and seconds ``fastmode_host_lag_seconds`` counted.

``--root DIR`` (repeatable) runs another checkout the same way first (a ``git worktree`` of the
commit before a change): before and after in one command.

Usage: python bench/scrape_stall.py [--streams N] [--tokens N] [--every S] [--root DIR ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.gateway_overhead import rate_ratio
from bench.harness import ROOT, cores, free_port, pin_self, stop, wait_healthy
from bench.pacing import chat_to, metric_sum
from bench.stream_client import stream

MODEL = "frontier-spark"
PROMPT = "Write a long story about the sea."


def start(root: Path, port: int, tmp: Path, core: int | None) -> subprocess.Popen[bytes]:
    def pin() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})

    return subprocess.Popen(
        [sys.executable, "-m", "fastmode", "serve", "--port", str(port), "--ledger",
         str(tmp / f"ledger-{port}.sqlite3"), "--log-level", "warning"],
        cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, preexec_fn=pin)


async def scrape(port: int) -> float:
    """One ``GET /metrics``: seconds from the request to its last byte."""
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    while await reader.read(65536):
        pass
    writer.close()
    return time.perf_counter() - t0


async def run_streams(port: int, n: int, tokens: int, every: float | None) -> dict[str, Any]:
    lag0 = await metric_sum(port, "fastmode_host_lag_seconds")
    done = asyncio.Event()
    times: list[float] = []

    async def scraper() -> None:
        while not done.is_set():
            await asyncio.sleep(every or 0)
            times.append(await scrape(port))

    task = asyncio.create_task(scraper()) if every else None
    proto = chat_to(MODEL)
    results = await asyncio.gather(*(stream(port, proto, PROMPT, tokens, None)
                                     for _ in range(n)))
    done.set()
    if task is not None:
        await task
    lag1 = await metric_sum(port, "fastmode_host_lag_seconds")
    rates = sorted(rate_ratio(r, 1) for r in results)
    return {"slowest": rates[0], "median": statistics.median(rates), "scrapes": len(times),
            "slips": lag1[0] - lag0[0], "lag_s": lag1[1] - lag0[1]}


async def measure(root: Path, args: argparse.Namespace, core: int | None,
                  tmp: Path) -> dict[str, Any]:
    port = free_port()
    proc = start(root, port, tmp, core)
    try:
        wait_healthy(port, proc)
        await stream(port, chat_to(MODEL), PROMPT, 50, None)  # warm-up
        await scrape(port)
        alone = [await scrape(port) for _ in range(args.scrapes)]
        quiet = await run_streams(port, args.streams, args.tokens, None)
        scraped = await run_streams(port, args.streams, args.tokens, args.every)
    finally:
        stop(proc)
    return {"scrape_ms": statistics.median(alone) * 1e3, "scrape_max_ms": max(alone) * 1e3,
            "quiet": quiet, "scraped": scraped}


def row(name: str, r: dict[str, Any]) -> str:
    q, s = r["quiet"], r["scraped"]
    return (f"| {name} | {r['scrape_ms']:.1f} ({r['scrape_max_ms']:.1f}) | "
            f"{q['slowest']:.1%} / {q['median']:.1%}, {q['slips']:.0f} ({q['lag_s'] * 1e3:.0f} ms) | "
            f"{s['slowest']:.1%} / {s['median']:.1%}, {s['slips']:.0f} "
            f"({s['lag_s'] * 1e3:.0f} ms), {s['scrapes']} scrapes |")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--every", type=float, default=0.2, help="seconds between scrapes")
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--root", action="append", type=Path, default=[],
                    help="another checkout to run first (before a change); repeatable")
    args = ap.parse_args()
    cpus = cores()
    server_core, client_core = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    pin_self(client_core)
    with tempfile.TemporaryDirectory() as name:
        results = [(root, await measure(root, args, server_core, Path(name)))
                   for root in [*args.root, ROOT]]
    print(f"| checkout | one scrape, ms: median (max) | {args.streams} spark streams alone: "
          "slowest / median of modeled, slips (lag) | the same, a scrape every "
          f"{args.every:g} s |")
    print("|---|---|---|---|")
    for root, r in results:
        print(row(str(root), r))


if __name__ == "__main__":
    asyncio.run(main())
