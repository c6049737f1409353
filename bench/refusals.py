"""Refusals beside what admitted requests wait: N concurrent spark streams, rounds in a row.

On the built-in config (``make serve``'s), ``--streams`` concurrent 1,000-token Chat streams on
the spark tier, ``--repeat`` times against one server. Each request is either served (its
``time_info.queue_time``: the modeled wait it had) or refused with 503 and a stated wait
(``retry-after``: the modeled wait beyond ``server.max_queue_wait_s``, or until a slot frees
when the queue is full; the message says which). A refusal tells the truth when the admitted
requests of the same round confirm it: a queue refused for a modeled wait over the bound is one
whose last admitted requests waited up to near that bound; a refusal that states 20 s while
every admitted request waited 2 s does not.

Usage: python bench/refusals.py [--streams 150] [--repeat 3] [--tokens 1000] [--url URL]
(without ``--url`` a server is started on the built-in config on a free loopback port)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.harness import start_gateway, stop


async def one(client: httpx.AsyncClient, i: int, tokens: int) -> dict[str, Any]:
    body = {"model": "frontier-spark", "stream": True, "max_tokens": tokens, "ignore_eos": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"write about the sea {i}"}]}
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            text = (await r.aread()).decode(errors="replace")
            return {"status": r.status_code, "retry_after": float(r.headers.get(
                "retry-after", "nan")), "message": text[:300]}
        info: dict[str, Any] = {}
        n = 0
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                event = orjson.loads(line[6:])
                info = event.get("time_info") or info
                if event.get("usage"):
                    n = event["usage"]["completion_tokens"]
        return {"status": 200, "queue_time": float(info.get("queue_time", 0.0)), "tokens": n}


async def round_(url: str, streams: int, tokens: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        rs = await asyncio.gather(*(one(client, i, tokens) for i in range(streams)))
    served = [r for r in rs if r["status"] == 200]
    refused = [r for r in rs if r["status"] != 200]
    return {"served": len(served), "refused": len(refused),
            "complete": all(r["tokens"] == tokens for r in served),
            "queue_max": max((r["queue_time"] for r in served), default=0.0),
            "queue_p50": statistics.median([r["queue_time"] for r in served]) if served else 0,
            "stated_max": max((r["retry_after"] for r in refused), default=0.0),
            "messages": sorted({r["message"][:160] for r in refused})[:3]}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--url")
    args = ap.parse_args()
    proc = None
    url = args.url
    with tempfile.TemporaryDirectory() as tmp:
        if url is None:
            proc, url = start_gateway("--ledger", str(Path(tmp) / "ledger.sqlite3"),
                                      "--log-level", "warning")
        try:
            rows = [await round_(url, args.streams, args.tokens) for _ in range(args.repeat)]
        finally:
            if proc is not None:
                stop(proc)
    print("| run | served | refused | all tokens | admitted queue wait p50 / max s | "
          "stated wait max s |\n|---|---|---|---|---|---|")
    for k, r in enumerate(rows, 1):
        print(f"| {k} | {r['served']} | {r['refused']} | {r['complete']} | "
              f"{r['queue_p50']:.2f} / {r['queue_max']:.2f} | {r['stated_max']:.1f} |")
        for m in r["messages"]:
            print(f"|   | refused: {m} |")
    sys.exit(0 if all(r["complete"] for r in rows) else 1)


if __name__ == "__main__":
    asyncio.run(main())
