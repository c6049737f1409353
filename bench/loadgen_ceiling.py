"""How fast can ``fastmode bench`` itself go? Its ceiling on one core, so it is never the bottleneck.

A raw asyncio HTTP/1.1 server in a subprocess (pinned to the other core when there is one)
streams pre-encoded fastmode-shaped chat chunks as fast as the socket takes them. The load
generator (``clients.loadgen``, pinned to core 0) runs closed loop against it and we count the
token events it parsed per second of wall time and per second of its own CPU time:

1. parser only: ``StreamParser.feed`` over in-memory 64 KiB chunks (no network);
2. loadgen, bulk writes: the server writes 16 events per write (reads coalesce);
3. loadgen, one event per write: every token its own HTTP chunk, as a real server sends them;
4. the naive client for comparison: httpx ``aiter_lines()`` + ``json.loads`` per event;
5. requests/s: one-token replies, to find the per-request ceiling.

Usage: ``python bench/loadgen_ceiling.py [--quick]``; prints a table (and ``--json FILE``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT, free_port

TOKEN_EVENT = (
    b'data: {"id":"chatcmpl-88b25500000001","object":"chat.completion.chunk","created":1795316791,'
    b'"model":"frontier-spark","service_tier":"default","system_fingerprint":"fp_fastmode",'
    b'"choices":[{"index":0,"delta":{"content":" model"},"logprobs":null,"finish_reason":null}],'
    b'"usage":null}\n\n'
)
ROLE_EVENT = TOKEN_EVENT.replace(b'{"content":" model"}',
                                 b'{"role":"assistant","content":"","refusal":null}')
FINISH = TOKEN_EVENT.replace(b'{"content":" model"}', b"{}").replace(
    b'"finish_reason":null', b'"finish_reason":"length"')
_MAX = re.compile(rb'"max_tokens":\s*(\d+)')


# --------------------------------------------------------------------------- the server


def _tail(n: int) -> bytes:
    usage = ('{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
             f'"usage":{{"prompt_tokens":20,"completion_tokens":{n},"total_tokens":{20 + n}}}}}')
    return FINISH + b"data: " + usage.encode() + b"\n\n" + b"data: [DONE]\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _serve(port: int, per_write: int) -> None:
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    block = _chunk(TOKEN_EVENT * per_write)
    single = _chunk(TOKEN_EVENT)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                headers = await reader.readuntil(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length:\s*(\d+)", headers)
                body = await reader.readexactly(int(m.group(1))) if m else b""
                if headers.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    continue
                mm = _MAX.search(body)
                n = int(mm.group(1)) if mm else 16
                writer.write(head + _chunk(ROLE_EVENT))
                full, rest = divmod(n, per_write)
                for i in range(full):
                    writer.write(block)
                    if i % 64 == 63:
                        await writer.drain()
                for _ in range(rest):
                    writer.write(single)
                writer.write(_chunk(_tail(n)) + b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def serve_main(port: int, per_write: int) -> None:
    import uvloop

    uvloop.run(_serve(port, per_write))


def start_server(per_write: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--per-write",
                             str(per_write)], cwd=ROOT)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(proc.pid, {1})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the ceiling server did not start")


# --------------------------------------------------------------------------- measurements


def parser_only(events: int) -> dict[str, Any]:
    from fastmode.clients.sse_scanner import StreamParser

    body = ROLE_EVENT + TOKEN_EVENT * events + _tail(events)
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    p = StreamParser(0.0)
    cpu0, t0 = time.process_time(), time.perf_counter()
    for c in chunks:
        p.feed(c, 0.0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert p.events == events and p.done
    return {"events": events, "wall_s": wall, "cpu_s": cpu}


def loadgen_run(url: str, concurrency: int, requests: int, tokens: int) -> dict[str, Any]:
    from fastmode.clients.load_config import LoadConfig
    from fastmode.clients.loadgen import run_sync
    from fastmode.clients.workload import RequestSpec, Route

    spec = RequestSpec("t", [{"role": "user", "content": "hi"}], tokens)
    cfg = LoadConfig(url, {"t": Route("/v1", "m")}, concurrency=concurrency, requests=requests,
                     progress=False)
    rr = run_sync(cfg, (spec for _ in range(requests)))
    bad = [r for r in rr.results if not r.ok or r.events != tokens]
    if bad:
        raise RuntimeError(f"{len(bad)} bad requests, e.g. {bad[0].error} {bad[0].detail}")
    return {"events": sum(r.events for r in rr.results), "requests": len(rr.results),
            "wall_s": rr.wall_s, "cpu_s": rr.cpu_s}


async def _naive(url: str, concurrency: int, requests: int, tokens: int) -> int:
    import httpx

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": tokens, "stream": True})
    left = requests
    events = 0

    async def user(client: httpx.AsyncClient) -> None:
        nonlocal left, events
        while left > 0:
            left -= 1
            async with client.stream("POST", url + "/v1/chat/completions", content=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        obj = json.loads(line[6:])
                        if obj["choices"] and obj["choices"][0]["delta"].get("content"):
                            events += 1

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        await asyncio.gather(*(user(client) for _ in range(concurrency)))
    return events


def naive_run(url: str, concurrency: int, requests: int, tokens: int) -> dict[str, Any]:
    import uvloop

    cpu0, t0 = time.process_time(), time.perf_counter()
    events = uvloop.run(_naive(url, concurrency, requests, tokens))
    return {"events": events, "requests": requests, "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - cpu0}


def row(name: str, r: dict[str, Any]) -> dict[str, Any]:
    r = dict(r, name=name)
    r["events_per_s_wall"] = r["events"] / r["wall_s"]
    r["events_per_s_cpu"] = r["events"] / r["cpu_s"] if r["cpu_s"] > 0 else None
    if "requests" in r:
        r["requests_per_s"] = r["requests"] / r["wall_s"]
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--per-write", type=int, default=16, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="smaller runs (~10 s)")
    ap.add_argument("--json", help="write the figures to FILE")
    args = ap.parse_args()
    if args.serve:
        serve_main(args.serve, args.per_write)
        return 0
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    scale = 0.25 if args.quick else 1.0
    conc, tokens = 32, 2000
    reqs = max(conc, int(640 * scale))
    rows = [row("parser only (in memory, 64 KiB chunks)", parser_only(int(2_000_000 * scale)))]
    for per_write, label in ((16, "loadgen, server writes 16 events/write"),
                             (1, "loadgen, server writes 1 event/write")):
        proc, url = start_server(per_write)
        try:
            rows.append(row(label, loadgen_run(url, conc, reqs, tokens)))
            if per_write == 1:
                rows.append(row("naive httpx aiter_lines + json.loads, 1 event/write",
                                naive_run(url, conc, max(conc, reqs // 2), tokens)))
                short = int(4000 * scale)
                rows.append(row("loadgen, 1-token replies (request ceiling), 64 users",
                                loadgen_run(url, 64, short, 1)))
        finally:
            proc.terminate()
            proc.wait()
    print(f"fastmode bench generator ceiling — Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs; client pinned to core 0, server to core 1; "
          f"{conc} closed-loop users, {tokens}-token streams")
    print(f"{'scenario':<58} {'events':>10} {'wall s':>7} {'events/s':>11} "
          f"{'events/CPU-s':>13} {'req/s':>8}")
    for r in rows:
        rps = f"{r['requests_per_s']:8.0f}" if "requests_per_s" in r else " " * 8
        cpu = f"{r['events_per_s_cpu']:13,.0f}" if r["events_per_s_cpu"] else " " * 13
        print(f"{r['name']:<58} {r['events']:>10,} {r['wall_s']:7.2f} "
              f"{r['events_per_s_wall']:11,.0f} {cpu} {rps}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
