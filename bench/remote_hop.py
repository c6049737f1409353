"""The remote hop per protocol: client -> gateway -> engine vs client -> engine.

A spark engine (``fastmode engine``) runs in its own process, and a gateway whose spark tier is
remote points at it. Streams of TOKENS tokens go one at a time, in rounds, directly to the
engine (Chat Completions) and through the gateway in each protocol it translates: Chat
Completions, the Responses API, Anthropic Messages. For every token the client notes its
arrival against the engine's modeled timeline, read from the stream's own ``time_info`` (first
token at queue + prompt time after the request was sent, then one modeled inter-token latency
apart): ``lag = received - modeled``. The hop's added latency is a protocol's lag minus the
direct lag, at the median and the 99th percentile, and for the first token.

Loopback, one 2-core machine: client, gateway and engine share the cores.

    python bench/remote_hop.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.harness import ROOT, free_port, stop, wait_healthy

TOKENS = 400
USER = [{"role": "user", "content": "Explain continuous batching."}]
# protocol -> (path, body, marker of a token event)
CASES = {
    "chat": ("/v1/chat/completions",
             {"model": "frontier-spark", "messages": USER, "stream": True,
              "max_tokens": TOKENS, "ignore_eos": True}, b'{"content":"'),
    "responses": ("/v1/responses",
                  {"model": "frontier-spark", "input": USER[0]["content"], "stream": True,
                   "max_output_tokens": TOKENS, "ignore_eos": True},
                  b'"type":"response.output_text.delta"'),
    "messages": ("/v1/messages",
                 {"model": "frontier-spark", "messages": USER, "stream": True,
                  "max_tokens": TOKENS}, b'"text_delta"'),
}


async def one(port: int, path: str, body: dict[str, Any], marker: bytes) -> tuple[list[float], float]:
    """(lag of each token, lag of the first), seconds."""
    raw = orjson.dumps(body)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t_send = time.perf_counter()
    writer.write(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 f"anthropic-version: 2023-06-01\r\ncontent-length: {len(raw)}\r\n\r\n"
                 .encode() + raw)
    arrivals: list[float] = []
    buf = b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        now = time.perf_counter()
        n = (buf[-64:] + data).count(marker) - buf[-64:].count(marker)
        if marker == b'{"content":"':
            n -= data.count(b'"role":"assistant","content":""')
        arrivals.extend([now] * max(0, n))
        buf += data
        if (b"data: [DONE]" in data or b"response.completed" in data
                or b"response.incomplete" in data or b"message_stop" in data):
            break
    writer.close()
    i = buf.rfind(b'"time_info":')
    ti = orjson.loads(buf[i + 12:buf.index(b"}", i) + 1])
    first = t_send + ti["queue_time"] + ti["prompt_time"]
    itl = ti["completion_time"] / max(1, len(arrivals) - 1)
    lags = [t - (first + k * itl) for k, t in enumerate(arrivals)]
    return lags, lags[0]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def measure(engine: int, gateway: int, rounds: int) -> dict[str, dict[str, float]]:
    lags: dict[str, list[float]] = {}
    firsts: dict[str, list[float]] = {}
    targets = [("direct (engine, chat)", engine, "chat")] + [
        (f"via gateway, {p}", gateway, p) for p in CASES]
    for _ in range(rounds):
        for name, port, proto in targets:
            path, body, marker = CASES[proto]
            lag, first = await one(port, path, body, marker)
            lags.setdefault(name, []).extend(lag)
            firsts.setdefault(name, []).append(first)
    return {name: {"p50": pct(v, 0.5), "p99": pct(v, 0.99),
                   "first": statistics.median(firsts[name])} for name, v in lags.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    engine_port, gw_port = free_port(), free_port()
    base = (ROOT / "deploy" / "gateway-remote.toml").read_text()
    base = base[:base.index("[remote]")]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "gw.toml"
        cfg.write_text(base + f'[remote.tiers.spark]\nupstreams = ["http://127.0.0.1:'
                       f'{engine_port}"]\n')
        env_cfg = Path(tmp) / "engine.toml"
        env_cfg.write_text(base)
        engine = subprocess.Popen([sys.executable, "-m", "fastmode", "engine", "--deployment",
                                   "spark", "--port", str(engine_port), "--config",
                                   str(env_cfg)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        gateway = subprocess.Popen([sys.executable, "-m", "fastmode", "serve", "--port",
                                    str(gw_port), "--config", str(cfg), "--ledger",
                                    str(Path(tmp) / "l.sqlite3")], cwd=ROOT,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(engine_port, engine)
            wait_healthy(gw_port, gateway)
            results = asyncio.run(measure(engine_port, gw_port, args.rounds))
        finally:
            stop(gateway, engine)
    direct = results["direct (engine, chat)"]
    print(f"\nper-token lag behind the modeled timeline, spark, {TOKENS}-token streams, "
          f"{args.rounds} rounds, one stream at a time\n")
    print("| path | lag p50 / p99 | added by the hop p50 / p99 | first token added (median) |")
    print("|---|---|---|---|")
    for name, r in results.items():
        added = ("—" if r is direct else
                 f"**{(r['p50'] - direct['p50']) * 1e3:+.2f} / "
                 f"{(r['p99'] - direct['p99']) * 1e3:+.2f} ms**")
        first = "—" if r is direct else f"{(r['first'] - direct['first']) * 1e3:+.2f} ms"
        print(f"| {name} | {r['p50'] * 1e3:.2f} / {r['p99'] * 1e3:.2f} ms | {added} | {first} |")


if __name__ == "__main__":
    main()
