"""Short streamed requests, fastmode beside aimock (@copilotkit/aimock, Node) in one run.

The pacing table's ``requests`` row on both servers in turn (fastmode, aimock, ... ``--repeat``
times): ``--requests`` Chat SSE streams of 16 chunks, 32 at a time, from the same raw-socket
client (``stream_client.py``, pinned to one core; each server pinned to the other); server CPU
per request and requests per second, median and range. fastmode runs the built-in config
(``make serve``'s, the mock model's prose held to 16 tokens); aimock answers a fixture of 16
chunks (``--chunk-size`` 20 characters of a 320-character reply), its log off, twice: with
``--latency 0`` (no pause: its chunks go out as fast as it writes them) and ``--latency 1`` (its
smallest pause, one millisecond a chunk: paced like fastmode's ~0.9 ms spark tokens).

aimock is not a dependency of fastmode: install it beside the checkout, where no test looks
(``npm install --prefix /tmp/aimock @copilotkit/aimock@1.43.0``), and pass ``--aimock
/tmp/aimock``. Node's own network use is none: the server binds 127.0.0.1 and is sent only
this client's requests.

Usage: python bench/peer_requests.py --aimock DIR [--requests N] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench.harness import cores, free_port, pin_self, start_pinned, stop, wait_healthy
from bench.pacing import PROMPT, Server, requests, serve

CHUNKS = 16
CHUNK_CHARS = 20


def aimock(root: Path, core: int | None, tmp: Path, latency: int) -> tuple[Any, Server]:
    """aimock's server (its ``llmock`` bin) on a fixture answering the client's prompt."""
    cli = root / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"
    if not cli.exists():
        raise SystemExit(f"no aimock under {root} (npm install --prefix {root} "
                         "@copilotkit/aimock@1.43.0)")
    node = shutil.which("node")
    if node is None:
        raise SystemExit("node is not on PATH")
    reply = ("The quick reply comes back in chunks. " * 10)[: CHUNKS * CHUNK_CHARS]
    fixture = tmp / "fixture.json"
    fixture.write_bytes(orjson.dumps({"fixtures": [
        {"match": {"userMessage": PROMPT}, "response": {"content": reply}}]}))
    port = free_port()
    proc = start_pinned([node, str(cli), "--port", str(port), "--host", "127.0.0.1",
                         "--fixtures", str(fixture), "--chunk-size", str(CHUNK_CHARS),
                         "--latency", str(latency), "--log-level", "silent"], core)
    wait_healthy(port, proc, path="/health")
    return proc, Server(f"aimock {latency} ms", port, proc.pid, None)


def span(xs: list[float], fmt: str) -> str:
    xs = sorted(xs)
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(xs[0])}–{fmt.format(xs[-1])})"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aimock", type=Path, required=True, help="where aimock is installed")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cpus = cores()
    server_core, client_core = (cpus[0], cpus[1]) if len(cpus) > 1 else (None, None)
    pin_self(client_core)
    procs: list[Any] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        try:
            fast_proc, fast = serve(None, server_core, tmp)
            procs.append(fast_proc)
            servers = [fast]
            for latency in (0, 1):
                proc, server = aimock(args.aimock, server_core, tmp, latency)
                procs.append(proc)
                servers.append(server)
            rows: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
            for server in servers:  # warm-up
                await requests(server, 200, CHUNKS, 32)
            for _ in range(args.repeat):
                for server in servers:
                    row = await requests(server, args.requests, CHUNKS, 32)
                    rows[server.name].append(row)
                    print(f"    {server.name:<12} {row}", flush=True)
        finally:
            stop(*procs)
    print(f"\n{args.requests} streamed requests of {CHUNKS} chunks, 32 at a time, "
          f"median of {args.repeat} (range):\n")
    print("| server | CPU per request | requests per second | CPU per request vs fastmode |")
    print("|---|---|---|---|")
    base = statistics.median(r["cpu_us"] for r in rows["fastmode"])
    for name, got in rows.items():
        cpu = [r["cpu_us"] for r in got]
        print(f"| {name} | {span(cpu, '{:.0f} µs')} | "
              f"{span([r['per_s'] for r in got], '{:.0f}')} | "
              f"{statistics.median(cpu) / base:.2f}× |")


if __name__ == "__main__":
    asyncio.run(main())
