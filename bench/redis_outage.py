"""What a Redis outage does to a gateway: hung, then stopped.

A private ``redis-server`` on a free loopback port and a ``fastmode serve`` on it (auth on, one
key with a limit on the spark tier, so each of its requests takes from a bucket in Redis). Then:

1. Redis hung (``SIGSTOP``: connections accepted, nothing answered): waves of concurrent
   limited requests, while one client polls ``/healthz``; reported: their statuses, the
   slowest, and the longest ``/healthz`` answer (how long the event loop was held);
2. Redis killed: limited requests one after another for a few seconds; reported: how many,
   their statuses;
3. the gateway's log: its lines about the state, and how many tracebacks.

Skipped (with a message) without the redis-server binary.

    python bench/redis_outage.py [--waves 3] [--concurrency 16] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.harness import ROOT, free_port, stop, wait_healthy
from fastmode.gateway.config import default_config_text

KEY = "sk-bench-limited"
BODY = {"model": "frontier-spark", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2}


def config(redis_port: int) -> str:
    text = default_config_text()
    auth = text.index("[auth]\nenabled = false")
    end = text.index("\n", auth + len("[auth]\n"))
    text = (text[:auth] + f'[auth]\nenabled = true\n[[auth.keys]]\nkey = "{KEY}"\n'
            "[auth.keys.limits.spark]\nrequests_per_minute = 1000000\n" + text[end + 1:])
    start = text.index("\n[state]\n") + 1
    stop_at = text.index("\n# [faults]", start)
    return (text[:start] + f'[state]\npath = ":memory:"\nredis_url = '
            f'"redis://127.0.0.1:{redis_port}/0"\n' + text[stop_at:])


async def hung(url: str, waves: int, concurrency: int) -> None:
    stalls: list[float] = []
    results: list[tuple[int | str, float]] = []
    headers = {"authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=200)) as c:
        await c.get(url + "/healthz")
        done = asyncio.Event()

        async def probe() -> None:
            while not done.is_set():
                t0 = time.perf_counter()
                await c.get(url + "/healthz")
                stalls.append(time.perf_counter() - t0)
                await asyncio.sleep(0.01)

        async def one() -> None:
            t0 = time.perf_counter()
            try:
                r = await c.post(url + "/v1/chat/completions", json=BODY, headers=headers)
                results.append((r.status_code, time.perf_counter() - t0))
            except httpx.HTTPError as exc:
                results.append((type(exc).__name__, time.perf_counter() - t0))

        prober = asyncio.create_task(probe())
        await asyncio.sleep(0.1)
        t0 = time.perf_counter()
        for _ in range(waves):
            await asyncio.gather(*[one() for _ in range(concurrency)])
        wall = time.perf_counter() - t0
        done.set()
        await prober
    print(f"Redis hung (SIGSTOP): {waves} waves of {concurrency} concurrent limited requests "
          f"in {wall:.2f} s: statuses {dict(Counter(s for s, _ in results))}, slowest "
          f"{max(t for _, t in results):.2f} s; /healthz answered {len(stalls)} times, the "
          f"longest in {max(stalls) * 1000:.0f} ms")


def stopped(url: str, seconds: float) -> None:
    statuses: Counter[int | str] = Counter()
    with httpx.Client(timeout=300) as c:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            try:
                r = c.post(url + "/v1/chat/completions", json=BODY,
                           headers={"authorization": f"Bearer {KEY}"})
                statuses[r.status_code] += 1
            except httpx.HTTPError as exc:  # counted, not fatal: what a client would see
                statuses[type(exc).__name__] += 1
    print(f"Redis killed: {sum(statuses.values())} limited requests in {seconds:g} s, one "
          f"after another: statuses {dict(statuses)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--waves", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    redis_bin = shutil.which("redis-server")
    if redis_bin is None:
        print("redis-server is not installed (apt-get install redis-server): nothing to do")
        return
    with tempfile.TemporaryDirectory() as tmp:
        rport, gport = free_port(), free_port()
        redis = subprocess.Popen([redis_bin, "--port", str(rport), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", tmp],
                                 stdout=subprocess.DEVNULL)
        cfg = Path(tmp) / "config.toml"
        cfg.write_text(config(rport))
        log = Path(tmp) / "gateway.log"
        time.sleep(0.3)
        with log.open("wb") as err:
            gateway = subprocess.Popen(
                [sys.executable, "-m", "fastmode", "serve", "--port", str(gport), "--config",
                 str(cfg)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        url = f"http://127.0.0.1:{gport}"
        try:
            wait_healthy(gport, gateway)
            os.kill(redis.pid, signal.SIGSTOP)
            asyncio.run(hung(url, args.waves, args.concurrency))
            os.kill(redis.pid, signal.SIGCONT)
            time.sleep(1.0)
            redis.kill()
            redis.wait()
            stopped(url, args.seconds)
        finally:
            stop(gateway)
            if redis.poll() is None:
                redis.kill()
        text = log.read_text(errors="replace")
        print(f"gateway log: {len(text.splitlines())} lines, {text.count('Traceback')} "
              "tracebacks; its lines about the state:")
        for line in text.splitlines():
            if line.startswith("state"):
                print("  " + line)


if __name__ == "__main__":
    main()
