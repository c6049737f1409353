"""What the shared state costs per request: Redis vs the embedded SQLite default.

Per request the gateway touches the state a fixed number of times, never per token: for a key
with request and token limits, admission takes from both buckets at once (one ``take_all_async``),
settlement appends one ledger row, a Responses turn stores its response, and a continuation
reads one back (from the local cache when it was made here, else from the store). This script
runs that sequence against each backend, in one asyncio loop as the gateway does, and reports
wall time and CPU per request; the ledger's batched writes (one background flush every
``flush_interval_s``) are included by flushing at the end.

A private ``redis-server`` on a free loopback port; skipped (with a message) if not installed.

    python bench/redis_state.py [--requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.harness import free_port
from fastmode.gateway.state import SQLiteState, StateBackend, StoredResponse, UsageRow
from fastmode.gateway.state.redis_backend import RedisState


def row(i: int) -> UsageRow:
    return UsageRow(f"req-{i}", time.time(), "sk-bench", "frontier", "fast", "fast",
                    "responses", "sse", 200, "completed", 900, 300, 250, 0, 250, 0.01)


async def per_request(state: StateBackend, n: int, remote_reads: bool) -> tuple[float, float]:
    """(wall us, cpu us) per request."""
    msgs = [{"role": "user", "content": "hello " * 50}, {"role": "assistant", "content": "x"}]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(n):
        now = time.monotonic()
        await state.take_all_async([("ratelimit|{sk-bench|fast}|requests", 1, 1e6 / 60, 1e6),
                                    ("ratelimit|{sk-bench|fast}|tokens", 1200, 1e9 / 60, 1e9)],
                                   now)
        state.append_usage(row(i))
        state.put_response(StoredResponse(f"resp_{i}", "frontier", msgs, 1200))
        if remote_reads and i:
            await state.get_response(f"resp_{i - 1}")
        if i % 64 == 0:
            await asyncio.sleep(0)  # let the background writes run, as between requests
    await state.flush()
    return ((time.perf_counter() - wall0) / n * 1e6, (time.process_time() - cpu0) / n * 1e6)


async def run(n: int) -> None:
    redis_bin = shutil.which("redis-server")
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        sqlite = SQLiteState(Path(tmp) / "state.sqlite3")
        await sqlite.start()
        await per_request(sqlite, 200, False)  # warm-up
        rows.append(("SQLite (embedded default)", *await per_request(sqlite, n, False)))
        await sqlite.close()
        if redis_bin is None:
            print("redis-server is not installed: Redis row skipped (apt-get install "
                  "redis-server)")
        else:
            port = free_port()
            proc = subprocess.Popen([redis_bin, "--port", str(port), "--bind", "127.0.0.1",
                                     "--save", "", "--appendonly", "no", "--dir", tmp],
                                    stdout=subprocess.DEVNULL)
            try:
                time.sleep(0.3)
                redis = RedisState(f"redis://127.0.0.1:{port}/0")
                await redis.start()
                await per_request(redis, 200, False)
                rows.append(("Redis (loopback)", *await per_request(redis, n, False)))
                # a continuation landing on another gateway: the response read from Redis
                other = RedisState(f"redis://127.0.0.1:{port}/0")
                await other.start()
                wall0 = time.perf_counter()
                for i in range(n):
                    await other.get_response(f"resp_{i}")
                read_us = (time.perf_counter() - wall0) / n * 1e6
                await other.close()
                await redis.close()
            finally:
                proc.terminate()
                proc.wait(timeout=10)
    print(f"\nper request ({n} requests: 1 take of 2 buckets, 1 ledger row, 1 stored response)\n")
    print("| backend | wall us / request | CPU us / request |")
    print("|---|---|---|")
    for name, wall, cpu in rows:
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")
    if len(rows) == 2:
        print(f"\nRedis adds {rows[1][1] - rows[0][1]:.1f} us of wall time and "
              f"{rows[1][2] - rows[0][2]:.1f} us of CPU per request; a continuation whose "
              f"response was made on another gateway reads it in {read_us:.1f} us.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000)
    asyncio.run(run(ap.parse_args().requests))


if __name__ == "__main__":
    main()
