"""Gateway overhead and streaming capacity (issue: OpenAI-compatible gateway).

1. Overhead: one spark stream; each token's arrival at a raw-socket client against its modeled
   time (first token at the modeled TTFT, then one modeled ITL apart): p50 / p99 lag.
2. Capacity: N concurrent streams (spark at ~1,000 tok/s each, and standard at ~65 tok/s), N
   doubling, until some stream falls below 95% of its modeled rate; aggregate token events/s
   and server CPU per token at the largest N that held.
3. The same sweep against a bare ASGI app (no framework, one shared ticker, pre-encoded chunks)
   that sends the same chunks at the same rate: the practical ceiling; the ratio is reported.

Loopback only; every run is bounded. Usage: python bench/gateway_overhead.py [--quick]
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from harness import ROOT, cpu_seconds, free_port, stop, wait_healthy

PY = sys.executable
TOKENS = 1500

BENCH_CONFIG_PATCH = {
    # large pools so that the gateway, not the modeled engine, is what saturates
    "spark": ("max_batch = 64", "max_batch = 1024", "occupancy = 0.5", "occupancy = 0.03"),
    "standard": ("max_batch = 256", "max_batch = 1024", "occupancy = 0.75", "occupancy = 0.19"),
}


def bench_config() -> str:
    text = (ROOT / "gateway/data/default.toml").read_text()
    out, section = [], ""
    for line in text.splitlines():
        if line.startswith("[deployments."):
            section = line.strip("[]").split(".")[1]
        patch = BENCH_CONFIG_PATCH.get(section)
        if patch:
            for old, new in zip(patch[::2], patch[1::2], strict=True):
                if line.startswith(old):
                    line = new + line[len(old):]
        out.append(line)
    return "\n".join(out)


async def one_stream(port: int, model: str, tokens: int) -> dict:
    """POST a streaming chat request over a raw socket; timestamps of every token event."""
    body = orjson.dumps({
        "model": model, "stream": True, "max_tokens": tokens, "ignore_eos": True, "seed": 1,
        "messages": [{"role": "user", "content": "hello"}],
    })
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t_send = time.perf_counter()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    arrivals: list[float] = []
    tail = b""
    buf = b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        now = time.perf_counter()
        n = data.count(b'"content":"') + (tail + data[:12]).count(b'"content":"') - tail.count(
            b'"content":"')
        # the role chunk carries "content":"" — not a token
        n -= data.count(b'"role":"assistant","content":""')
        arrivals.extend([now] * max(0, n))
        tail = data[-12:]
        buf = (buf + data)[-4000:]
        if b"data: [DONE]" in buf:
            break
    writer.close()
    info = {}
    for line in buf.split(b"\n"):
        if b'"time_info"' in line and line.startswith(b"data: "):
            info = orjson.loads(line[6:])["time_info"]
    return {"t_send": t_send, "arrivals": arrivals, "time_info": info}


def lag_stats(r: dict) -> list[float]:
    info, arr = r["time_info"], r["arrivals"]
    if len(arr) < 3 or not info:
        return []
    itl = info["completion_time"] / (len(arr) - 1)
    first = r["t_send"] + info["queue_time"] + info["prompt_time"]
    lags = [a - (first + k * itl) for k, a in enumerate(arr)]
    base = min(lags)  # request parsing before the engine clock starts is not streaming overhead
    return [x - base for x in lags]


def held_rate(r: dict) -> float:
    """Received tokens/s over modeled tokens/s for one stream, in steady state.

    The first 10% of tokens are left out: all streams of a sweep start at once, and the burst of
    request parsing delays first tokens, which is TTFT, not streaming rate.
    """
    arr, info = r["arrivals"], r["time_info"]
    if len(arr) < 20 or not info or info["completion_time"] <= 0:
        return 0.0
    k = len(arr) // 10
    got = (len(arr) - 1 - k) / max(arr[-1] - arr[k], 1e-9)
    modeled = (len(arr) - 1) / info["completion_time"]
    return got / modeled


async def sweep(port: int, pid: int, model: str, tokens: int, start: int, limit: int) -> list:
    rows = []
    n = start
    while n <= limit:
        c0 = cpu_seconds(pid)
        t0 = time.perf_counter()
        results = await asyncio.wait_for(
            asyncio.gather(*(one_stream(port, model, tokens) for _ in range(n))), 120
        )
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - c0
        events = sum(len(r["arrivals"]) for r in results)
        rates = [held_rate(r) for r in results]
        worst = max(rates, key=lambda x: abs(x - 1.0))
        rows.append({"streams": n, "worst_rate_ratio": worst, "events_per_s": events / wall,
                     "cpu_us_per_token": cpu / max(events, 1) * 1e6, "held": 0.95 <= worst <= 1.05})
        print(f"  {model:<15} n={n:<5} worst stream at {worst:6.1%} of modeled rate, "
              f"{events / wall:9.0f} events/s, server CPU {cpu / max(events, 1) * 1e6:6.1f} "
              f"us/token", flush=True)
        if not 0.95 <= worst <= 1.05:
            break
        n *= 2
    return rows


BARE_APP = r'''
import asyncio, orjson, sys
ITL = float(sys.argv[2])
CHUNK = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,'
         b'"finish_reason":null}]}\n\n')
tick = None
async def ticker():
    global tick
    loop = asyncio.get_running_loop()
    t = loop.time()
    while True:
        tick = loop.create_future()
        t += ITL
        await asyncio.sleep(max(0, t - loop.time()))
        tick.set_result(None)
async def app(scope, receive, send):
    global tick
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                asyncio.get_running_loop().create_task(ticker())
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"}); return
    if scope["path"] == "/healthz":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"}); return
    body = b""
    while True:
        m = await receive(); body += m.get("body", b"")
        if not m.get("more_body"): break
    n = orjson.loads(body)["max_tokens"]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    for _ in range(n):
        await tick
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
    info = orjson.dumps({"time_info": {"queue_time": 0, "prompt_time": 0,
                                       "completion_time": (n - 1) * ITL}})
    await send({"type": "http.response.body", "body": b"data: " + info + b"\n\ndata: [DONE]\n\n"})
import uvicorn
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", loop="uvloop",
            http="httptools")
'''


async def main() -> None:
    quick = "--quick" in sys.argv
    limit = 256 if quick else 2048
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "bench.toml"
        cfg.write_text(bench_config())
        port = free_port()
        proc = subprocess.Popen(
            [PY, "-m", "commands", "serve", "--port", str(port), "--config", str(cfg)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            wait_healthy(port, proc)
            print("1. overhead: one spark stream, token arrival minus modeled time")
            await one_stream(port, "frontier-spark", 50)  # warm-up
            r = await one_stream(port, "frontier-spark", TOKENS)
            lags = sorted(lag_stats(r))
            p50 = statistics.median(lags) * 1e3
            p99 = lags[int(0.99 * (len(lags) - 1))] * 1e3
            print(f"  {len(lags)} tokens: lag p50 {p50:.3f} ms, p99 {p99:.3f} ms")
            print("2. capacity through fastmode (one uvicorn worker)")
            spark = await sweep(port, proc.pid, "frontier-spark", TOKENS, 8, limit)
            std = await sweep(port, proc.pid, "frontier", 200, 64, limit)
        finally:
            stop(proc)
    itl = 1 / 1150
    port = free_port()
    bare = subprocess.Popen([PY, "-c", BARE_APP, str(port), str(itl)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(port, bare)
        print("3. the same chunks from a bare ASGI app (the practical ceiling)")
        bare_rows = await sweep(port, bare.pid, "bare", TOKENS, 8, limit)
    finally:
        stop(bare)

    def best(rows: list) -> dict:
        held = [r for r in rows if r["held"]]
        return held[-1] if held else {"streams": 0, "events_per_s": 0, "cpu_us_per_token": 0}

    s, b, t = best(spark), best(bare_rows), best(std)
    print("\nsummary")
    print(f"  overhead p50 {p50:.3f} ms, p99 {p99:.3f} ms per token (spark, one stream)")
    print(f"  spark: {s['streams']} streams held, {s['events_per_s']:.0f} events/s, "
          f"{s['cpu_us_per_token']:.1f} us CPU/token")
    print(f"  standard: {t['streams']} streams held, {t['events_per_s']:.0f} events/s")
    print(f"  bare ASGI: {b['streams']} streams held, {b['events_per_s']:.0f} events/s, "
          f"{b['cpu_us_per_token']:.1f} us CPU/token")
    if b["events_per_s"]:
        print(f"  fastmode / bare ASGI events/s at capacity: "
              f"{s['events_per_s'] / b['events_per_s']:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
