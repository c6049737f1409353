"""The extra hop of the compose topology: client -> gateway -> engine vs client -> engine.

1. Added latency per token. A spark engine (``fastmode engine``'s app, unchanged) runs behind a
   thin ASGI wrapper that, for requests carrying ``"bench_stamp": true``, puts an SSE comment
   ``: ts=<CLOCK_MONOTONIC>`` in front of every body write (the gateway forwards comments like
   any event). The client reads each token's write-to-receive time, directly from the engine and
   through the remote gateway, in the same run and against the same engine: one stream at a
   time, then 8 + 8 concurrent streams. The hop's added latency is the difference.
2. Streaming capacity: N concurrent spark streams (1,500 tokens, ``ignore_eos``), N growing
   by 1.5x from 8, until some stream's steady rate leaves 95-105% of its modeled rate (the
   criterion of bench/gateway_overhead.py), through the remote gateway (engine in its own
   process) and through an in-process gateway (``make serve``), same config and physics.
   Reported: the largest N held, token events/s received, and CPU per token of the gateway
   process (and of the engine process, for the remote path), at equal N.

Both gateways use deploy/gateway-remote.toml (the compose topology's file) with larger spark
pools, so the modeled engine is not what saturates (as in bench/gateway_overhead.py). Loopback
only; every wait is bounded; every process is started here and stopped by its pid at the end.

Usage: python bench/remote_hop.py [--quick]
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from harness import ROOT, cpu_seconds, free_port, start, stop, wait_healthy

PY = sys.executable
TOKENS = 1500
PATCH = ("max_batch = 64", "max_batch = 1024", "occupancy = 0.5", "occupancy = 0.03")


def bench_config(remote: bool) -> str:
    """deploy/gateway-remote.toml with a large spark pool; without [remote] for in-process."""
    text = (ROOT / "deploy/gateway-remote.toml").read_text()
    if not remote:
        text = text.split("\n[remote]", 1)[0]
    out, section = [], ""
    for line in text.splitlines():
        if line.startswith("[deployments."):
            section = line.strip("[]").split(".")[1]
        if section == "spark":
            for old, new in zip(PATCH[::2], PATCH[1::2], strict=True):
                if line.startswith(old):
                    line = new + line[len(old):]
        out.append(line)
    return "\n".join(out) + "\n"


def run_engine(port: int, config: str, deployment: str) -> None:
    """The engine app of `fastmode engine`, with write timestamps on request."""
    import uvicorn

    from gateway.app import create_app
    from gateway.config import load_config
    from gateway.engine_config import engine_config

    app = create_app(engine_config(load_config(config), deployment))

    async def stamped(scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            return await app(scope, receive, send)
        stamp = False

        async def recv():
            nonlocal stamp
            m = await receive()
            if b'"bench_stamp":true' in m.get("body", b""):
                stamp = True
            return m

        async def snd(m):
            if stamp and m["type"] == "http.response.body" and m.get("body"):
                m = {**m, "body": b": ts=%.9f\n\n" % time.perf_counter() + m["body"]}
            await send(m)

        await app(scope, recv, snd)

    uvicorn.run(stamped, host="127.0.0.1", port=port, log_level="warning", loop="uvloop",
                http="httptools", ws="none")


async def one_stream(port: int, tokens: int, stamp: bool = False) -> dict:
    """A raw-socket streaming request; token arrival times and, with ``stamp``, each token's
    engine-write-to-receive latency."""
    body = {"model": "frontier-spark", "stream": True, "max_tokens": tokens, "ignore_eos": True,
            "seed": 1, "messages": [{"role": "user", "content": "hello"}]}
    if stamp:
        body["bench_stamp"] = True
    raw = orjson.dumps(body)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw
    )
    arrivals: list[float] = []
    lat: list[float] = []
    info: dict = {}
    carry = b""
    ts = None
    done = False
    while not done:
        data = await asyncio.wait_for(reader.read(65536), 60)
        if not data:
            break
        now = time.perf_counter()
        lines = (carry + data).split(b"\n")
        carry = lines.pop()
        for line in lines:
            if line.startswith(b": ts="):
                ts = float(line[5:])
            elif line.startswith(b"data: "):
                if b'"content":"' in line and b'"role":"assistant"' not in line:
                    arrivals.append(now)
                    if ts is not None:
                        lat.append(now - ts)
                elif b'"time_info"' in line:
                    info = orjson.loads(line[6:])["time_info"]
                elif line.startswith(b"data: [DONE]"):
                    done = True
    writer.close()
    return {"arrivals": arrivals, "lat": lat, "time_info": info}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1)))]


def held_rate(r: dict) -> float:
    """Received tokens/s over modeled tokens/s in steady state (first 10% left out)."""
    arr, info = r["arrivals"], r["time_info"]
    if len(arr) < 20 or not info or info["completion_time"] <= 0:
        return 0.0
    k = len(arr) // 10
    got = (len(arr) - 1 - k) / max(arr[-1] - arr[k], 1e-9)
    return got / ((len(arr) - 1) / info["completion_time"])


async def sweep(label: str, port: int, pids: dict[str, int], limit: int) -> list[dict]:
    rows, n = [], 8
    while n <= limit:
        c0 = {k: cpu_seconds(p) for k, p in pids.items()}
        t0 = time.perf_counter()
        results = await asyncio.wait_for(
            asyncio.gather(*(one_stream(port, TOKENS) for _ in range(n))), 180)
        wall = time.perf_counter() - t0
        cpu = {k: cpu_seconds(p) - c0[k] for k, p in pids.items()}
        events = sum(len(r["arrivals"]) for r in results)
        worst = max((held_rate(r) for r in results), key=lambda x: abs(x - 1.0))
        row = {"n": n, "worst": worst, "eps": events / wall, "held": 0.95 <= worst <= 1.05,
               **{f"cpu_{k}": cpu[k] / max(events, 1) * 1e6 for k in cpu}}
        rows.append(row)
        cpu_txt = ", ".join(f"{k} CPU {row[f'cpu_{k}']:5.1f} us/token" for k in cpu)
        print(f"  {label:<10} n={n:<5} worst stream {worst:6.1%} of modeled, "
              f"{events / wall:8.0f} tok/s received, {cpu_txt}", flush=True)
        if not row["held"]:
            break
        n = int(n * 1.5)
    return rows


async def hop_latency(engine: int, gateway: int, streams: int, tokens: int) -> dict:
    direct: list[float] = []
    hop: list[float] = []
    await one_stream(engine, 50, True)  # warm-up both paths
    await one_stream(gateway, 50, True)
    print("1a. one stream at a time, direct and through the gateway alternately", flush=True)
    for _ in range(streams):
        direct += (await one_stream(engine, tokens, True))["lat"]
        hop += (await one_stream(gateway, tokens, True))["lat"]
    out = {"single": (direct, hop)}
    print("1b. 8 direct + 8 through the gateway, concurrently (~18k tok/s in all)", flush=True)
    for _ in range(2 if streams < 10 else 4):
        rs = await asyncio.wait_for(asyncio.gather(
            *(one_stream(engine, tokens, True) for _ in range(8)),
            *(one_stream(gateway, tokens, True) for _ in range(8))), 120)
        d, h = out.setdefault("8+8", ([], []))
        d += [x for r in rs[:8] for x in r["lat"]]
        h += [x for r in rs[8:] for x in r["lat"]]
    return out


async def main() -> None:
    quick = "--quick" in sys.argv
    limit = 128 if quick else 1024
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        remote_cfg, local_cfg = Path(tmp) / "remote.toml", Path(tmp) / "local.toml"
        remote_cfg.write_text(bench_config(remote=True))
        local_cfg.write_text(bench_config(remote=False))
        e_port, g_port, l_port = free_port(), free_port(), free_port()
        env = {f"FASTMODE_UPSTREAM_ENGINE_{name}": f"http://127.0.0.1:{free_port()}"
               for name in ("STANDARD_1", "STANDARD_2", "FAST")}  # unused tiers: no engine
        env["FASTMODE_UPSTREAM_ENGINE_SPARK"] = f"http://127.0.0.1:{e_port}"
        try:
            engine = start([PY, __file__, "_engine", str(e_port), str(remote_cfg), "spark"])
            procs.append(engine)
            wait_healthy(e_port, engine)
            gateway = start([PY, "-m", "commands", "serve", "--port", str(g_port),
                             "--config", str(remote_cfg)], env)
            procs.append(gateway)
            wait_healthy(g_port, gateway)
            print(f"remote: gateway :{g_port} (pid {gateway.pid}) -> spark engine :{e_port} "
                  f"(pid {engine.pid})", flush=True)
            lat = await hop_latency(e_port, g_port, 4 if quick else 10, 400)
            print("2. capacity: spark streams through the remote gateway", flush=True)
            remote_rows = await sweep("remote", g_port,
                                      {"gateway": gateway.pid, "engine": engine.pid}, limit)
            stop(gateway, engine)
            local = start([PY, "-m", "commands", "serve", "--port", str(l_port),
                           "--config", str(local_cfg)])
            procs.append(local)
            wait_healthy(l_port, local)
            print("   capacity: spark streams through an in-process gateway", flush=True)
            local_rows = await sweep("in-process", l_port, {"gateway": local.pid}, limit)
        finally:
            stop(*procs)

    print("\nsummary (loopback)")
    print("  per-token latency, engine write -> client receive (ms):")
    print("    load        path      tokens    p50     p99   | added by the hop: p50    p99")
    for load, (d, h) in lat.items():
        for name, xs in (("direct", d), ("gateway", h)):
            extra = ""
            if name == "gateway":
                extra = (f"   | {(pct(h, .5) - pct(d, .5)) * 1e3:+.3f} "
                         f"{(pct(h, .99) - pct(d, .99)) * 1e3:+.3f}")
            print(f"    {load:<11} {name:<8} {len(xs):>6}  {pct(xs, .5) * 1e3:6.3f}  "
                  f"{pct(xs, .99) * 1e3:6.3f}{extra}")

    def best(rows: list[dict]) -> dict:
        held = [r for r in rows if r["held"]]
        return held[-1] if held else rows[0]

    r, i = best(remote_rows), best(local_rows)
    print("  streaming capacity, spark: largest N whose every stream held 95-105% of the "
          "modeled rate:")
    print(f"    in-process: {i['n']:>5} streams, {i['eps']:8.0f} tok/s, gateway CPU "
          f"{i['cpu_gateway']:.1f} us/token")
    print(f"    remote:     {r['n']:>5} streams, {r['eps']:8.0f} tok/s, gateway CPU "
          f"{r['cpu_gateway']:.1f} us/token, engine CPU {r['cpu_engine']:.1f} us/token")
    print(f"    remote / in-process: {r['eps'] / max(i['eps'], 1):.2f}x tok/s held; gateway "
          f"CPU per token {r['cpu_gateway'] / max(i['cpu_gateway'], 1e-9):.2f}x")
    print("  CPU per token at equal N (us): N   in-process gw | remote gw + engine = total")
    local_by_n = {row["n"]: row for row in local_rows}
    for row in remote_rows:
        loc = local_by_n.get(row["n"])
        if loc is None:
            continue
        print(f"    {row['n']:>30}   {loc['cpu_gateway']:6.1f}      | {row['cpu_gateway']:6.1f} + "
              f"{row['cpu_engine']:5.1f} = {row['cpu_gateway'] + row['cpu_engine']:5.1f}")
    print("  (2 cores shared by the client, the gateway and the engine: the remote topology "
          "runs one process more on the same cores)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_engine":
        sys.path.insert(0, str(ROOT))
        run_engine(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        asyncio.run(main())
