"""A bounded soak of the gateway: mixed tiers and APIs, random disconnects, slow and stalled
readers, injected faults — then RSS drift, leaked slots and an accounting table.

    python bench/soak.py                       # 10 minutes, 64 concurrent clients
    python bench/soak.py --minutes 1 --concurrency 32
    python bench/soak.py --ledger-bench        # the ledger's cost on the hot path only

The server is a real ``fastmode serve`` (its own ledger file, the admin API on, readers cut
after 5 s behind). Each client runs requests back to back, each drawn at random (seeded):

* API: Chat Completions 40% (70% streamed), Responses 30% (50% streamed), Messages 20% (60%
  streamed), a Responses websocket turn 10%;
* tier: ``frontier`` 60% (a quarter of them on the fast tier), ``frontier-spark`` 40%;
* behaviour: 5% disconnect mid-stream, 3% slow reader, 1% stalled reader (stops reading until
  the server cuts it), 6% an injected fault (429/500/503/529/cut/malformed/error-event/stall).

The accounting: every request sent ends, on the client's side, as completed, failed (an error
status or event, a dropped connection) or cancelled (the client left). The ledger must hold a
row for each admitted request, and for each completed one exactly the tokens and cost the client
was told. RSS is read after warm-up (30% of the run: the response store, caches and the allocator's
arenas fill first) and at the end; leaked slots are the
turns still in flight and our sequences still in a batch once the clients stopped and the
stalled ones were cut.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import websockets

from bench.harness import ROOT, free_port
from bench.soak_watch import FROZEN_AFTER_S, log_findings, metric, watch_replicas
from fastmode.gateway.config import default_config_text

ADMIN = {"authorization": "Bearer soak-admin"}
CONFIG_EXTRA = """
[admin]
enabled = true
key = "soak-admin"
"""
FAULTS = ["429", "500", "503", "529", "cut;after=5", "malformed;after=3",
          "error-event;after=4", "stall;after=2;s=0.5"]
USER = [{"role": "user", "content": "Explain continuous batching in two paragraphs."}]
READ_TIMEOUT_S = 60.0  # a request that gets no byte for this long is counted as hung


@dataclass
class Outcome:
    kind: str  # completed | failed | cancelled
    api: str
    request_id: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    sent: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # unexpected client exceptions
    hung: Counter[str] = field(default_factory=Counter)  # no byte for READ_TIMEOUT_S, by API


def draw(rng: random.Random, disconnects: float = 0.05, faults: float = 0.06) -> dict[str, Any]:
    r = rng.random()
    api = "chat" if r < 0.4 else "responses" if r < 0.7 else "messages" if r < 0.9 else "ws"
    spark = rng.random() < 0.4
    fast = not spark and rng.random() < 0.25
    b = rng.random()
    d = disconnects
    behaviour = ("disconnect" if b < d else "slow" if b < d + 0.03 else "stall" if b < d + 0.04
                 else "plain")
    fault = rng.choice(FAULTS) if rng.random() < faults else None
    stream = api == "ws" or rng.random() < {"chat": 0.7, "responses": 0.5,
                                            "messages": 0.6}.get(api, 1)
    return {"api": api, "model": "frontier-spark" if spark else "frontier", "fast": fast,
            "behaviour": behaviour if stream else "plain", "fault": fault, "stream": stream,
            "max_tokens": rng.randint(20, 300)}


def request_body(d: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    prefix = "/fast/v1" if d["fast"] else "/v1"
    if d["api"] == "chat":
        body = {"model": d["model"], "messages": USER, "max_tokens": d["max_tokens"],
                "stream": d["stream"]}
        if d["stream"]:
            body["stream_options"] = {"include_usage": True}
        return prefix + "/chat/completions", body
    if d["api"] == "responses":
        return prefix + "/responses", {"model": d["model"], "input": USER[0]["content"],
                                       "max_output_tokens": d["max_tokens"],
                                       "stream": d["stream"]}
    return prefix + "/messages", {"model": d["model"], "messages": USER,
                                  "max_tokens": d["max_tokens"], "stream": d["stream"]}


def usage_of(api: str, obj: dict[str, Any], out: Outcome) -> None:
    """Fill the outcome's tokens and cost from a usage object the server sent."""
    if api == "chat":
        out.input_tokens, out.output_tokens = obj["prompt_tokens"], obj["completion_tokens"]
    elif api == "messages":
        out.input_tokens = obj.get("input_tokens", out.input_tokens) + obj.get(
            "cache_read_input_tokens", 0)
        out.output_tokens = obj["output_tokens"]
    else:
        out.input_tokens, out.output_tokens = obj["input_tokens"], obj["output_tokens"]
    out.cost = obj["cost_usd"]


async def http_request(client: httpx.AsyncClient, d: dict[str, Any], lag_s: float) -> Outcome:
    path, body = request_body(d)
    headers = {"x-fastmode-fault": d["fault"]} if d["fault"] else {}
    out = Outcome("failed", d["api"])
    if not d["stream"]:
        r = await client.post(path, json=body, headers=headers)
        out.request_id = r.headers.get("x-request-id", "")
        if r.status_code != 200:
            return out
        try:
            usage_of(d["api"], r.json()["usage"], out)
        except (ValueError, KeyError):
            return out  # a malformed body
        out.kind = "completed"
        return out
    async with client.stream("POST", path, json=body, headers=headers) as r:
        out.request_id = r.headers.get("x-request-id", "")
        if r.status_code != 200:
            await r.aread()
            return out
        n = 0
        ended = False
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            n += 1
            if d["behaviour"] == "disconnect" and n == 5:
                out.kind = "cancelled"
                return out  # leaving the block closes the connection
            if d["behaviour"] == "slow":
                await asyncio.sleep(0.02)
            if d["behaviour"] == "stall" and n == 3:
                await asyncio.sleep(lag_s + 3)  # the server cuts us meanwhile
                out.kind = "cancelled"
                return out
            data = line[6:]
            if data == "[DONE]":
                ended = True
                continue
            try:
                event = json.loads(data)
            except ValueError:
                continue  # an injected malformed event: the stream goes on
            if "error" in event and d["api"] == "chat" or event.get("type") in (
                    "error", "response.failed"):
                return out
            if d["api"] == "chat" and event.get("usage"):
                usage_of("chat", event["usage"], out)
            elif event.get("type") == "response.completed" or event.get(
                    "type") == "response.incomplete":
                usage_of("responses", event["response"]["usage"], out)
                ended = True
            elif event.get("type") == "message_start":
                usage_of("messages", event["message"]["usage"], out)
            elif event.get("type") == "message_delta":
                usage_of("messages", {**event["usage"], "input_tokens": out.input_tokens}, out)
            elif event.get("type") == "message_stop":
                ended = True
        out.kind = "completed" if ended else "failed"
    return out


async def ws_request(url: str, d: dict[str, Any]) -> Outcome:
    out = Outcome("failed", "ws")
    headers = {"x-fastmode-fault": d["fault"]} if d["fault"] else {}
    ws_url = url.replace("http://", "ws://") + ("/fast/v1" if d["fast"] else "/v1") + "/responses"
    async with websockets.connect(ws_url, additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": d["model"],
                                  "input": USER[0]["content"],
                                  "max_output_tokens": d["max_tokens"]}))
        n = 0
        while True:
            try:
                event = json.loads(await asyncio.wait_for(ws.recv(), READ_TIMEOUT_S))
            except ValueError:
                continue  # an injected malformed frame: the turn goes on
            n += 1
            kind = event.get("type")
            if kind == "response.created":
                out.request_id = event["response"]["id"].replace("resp_", "req-")
            if d["behaviour"] == "disconnect" and n == 6:
                out.kind = "cancelled"
                return out
            if kind in ("error", "response.failed"):
                return out
            if kind in ("response.completed", "response.incomplete"):
                usage_of("responses", event["response"]["usage"], out)
                out.kind = "completed"
                return out


async def client_loop(i: int, url: str, deadline: float, tally: Tally, args: argparse.Namespace,
                      lag_s: float) -> None:
    rng = random.Random(args.seed * 1000 + i)
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=10)
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        while time.monotonic() < deadline:
            d = draw(rng, args.disconnects, args.faults)
            tally.sent += 1
            try:
                out = await (ws_request(url, d) if d["api"] == "ws"
                             else http_request(client, d, lag_s))
            except (httpx.TimeoutException, TimeoutError):
                tally.hung[d["api"]] += 1
                out = Outcome("failed", d["api"])
            except (httpx.HTTPError, websockets.WebSocketException, OSError):
                out = Outcome("failed", d["api"])
            except Exception as exc:  # noqa: BLE001 - a client bug must not end the loop
                tally.errors[type(exc).__name__] += 1
                out = Outcome("failed", d["api"])
            tally.outcomes.append(out)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="fastmode-soak-"))
    lag_s = 5.0
    cfg = tmp / "soak.toml"
    text = default_config_text()
    for key, value in (("stream_max_lag_s", lag_s), ("socket_send_buffer_bytes", 65536)):
        text, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.M)
        assert n == 1, key
    cfg.write_text(text + CONFIG_EXTRA)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "server.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "fastmode", "serve", "--port", str(port), "--config", str(cfg),
         "--ledger", str(tmp / "ledger.sqlite3")], cwd=ROOT, stdout=log, stderr=log)
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=0.5).status_code == 200:
                    break
            except httpx.HTTPError:
                await asyncio.sleep(0.1)
        proc = psutil.Process(server.pid)
        started = time.monotonic()
        duration = args.minutes * 60
        deadline = started + duration
        tally = Tally()
        clients = [asyncio.create_task(client_loop(i, url, deadline, tally, args, lag_s))
                   for i in range(args.concurrency)]
        frozen: dict[str, float] = {}
        unready: Counter[str] = Counter()
        watcher = asyncio.create_task(watch_replicas(url, deadline + READ_TIMEOUT_S, frozen,
                                                     unready))
        warm_at = started + duration * args.warmup
        rss_warm = None
        rss_samples: list[tuple[float, float]] = []
        while time.monotonic() < deadline:
            await asyncio.sleep(min(5.0, max(0.1, deadline - time.monotonic())))
            rss = proc.memory_info().rss / 2**20
            rss_samples.append((time.monotonic() - started, rss))
            if rss_warm is None and time.monotonic() >= warm_at:
                rss_warm = rss
        await asyncio.gather(*clients, return_exceptions=True)
        watcher.cancel()
        rss_end = proc.memory_info().rss / 2**20
        # the clients stopped: everything admitted must end (stalled ones are cut by the lag)
        settle_deadline = time.monotonic() + lag_s + 15
        while time.monotonic() < settle_deadline:
            if metric(url, "fastmode_turns_in_flight") == 0 and metric(
                    url, "fastmode_replica_running") == 0:
                break
            await asyncio.sleep(0.2)
        leaked_turns = metric(url, "fastmode_turns_in_flight")
        leaked_slots = metric(url, "fastmode_replica_running")
        faults = metric(url, "fastmode_faults_injected_total")
        rows = httpx.get(url + "/admin/ledger", headers=ADMIN, params={"limit": 100000},
                         timeout=60).json()["data"]
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(60)
        log.close()
    health = {"frozen_replicas": frozen, "unready_polls": dict(unready),
              "server_log": dict(log_findings(tmp / "server.log"))}
    return report(tally, rows, rss_warm or rss_end, rss_end, rss_samples, leaked_turns,
                  leaked_slots, faults, code, args, tmp, health)


def report(tally: Tally, rows: list[dict[str, Any]], rss_warm: float, rss_end: float,
           samples: list[tuple[float, float]], leaked_turns: float, leaked_slots: float,
           faults: float, code: int, args: argparse.Namespace, tmp: Path,
           health: dict[str, Any]) -> dict[str, Any]:
    kinds = Counter(o.kind for o in tally.outcomes)
    by_id = {r["request_id"]: r for r in rows}
    completed = [o for o in tally.outcomes if o.kind == "completed"]
    missing = [o for o in completed if o.request_id not in by_id]
    mismatched = [o for o in completed if o.request_id in by_id and (
        by_id[o.request_id]["output_tokens"] != o.output_tokens
        or abs(by_id[o.request_id]["cost_usd"] - o.cost) > 1e-9)]
    ended = Counter(r["ended"] for r in rows)
    client_kind = {o.request_id: o.kind for o in tally.outcomes if o.request_id}
    # rows the server completed that the client did not count as completed, and why
    other = Counter((r["fault"] or "no fault", client_kind.get(r["request_id"], "unknown"))
                    for r in rows if r["ended"] == "completed"
                    and client_kind.get(r["request_id"]) != "completed")
    client_cost = sum(o.cost for o in completed)
    ledger_cost = sum(by_id[o.request_id]["cost_usd"] for o in completed
                      if o.request_id in by_id)
    drift = (rss_end - rss_warm) / rss_warm * 100
    half = [r for t, r in samples if t >= samples[-1][0] / 2] if samples else [rss_end]
    half_drift = (half[-1] - half[0]) / half[0] * 100
    print(f"soak: {args.minutes:g} min, {args.concurrency} clients, seed {args.seed}; "
          f"server log and ledger in {tmp}")
    print(f"  sent {tally.sent} = completed {kinds['completed']} + failed {kinds['failed']} "
          f"+ cancelled {kinds['cancelled']}  ({'ok' if tally.sent == sum(kinds.values()) else 'MISMATCH'})")
    print(f"  ledger rows {len(rows)}: " + ", ".join(f"{k} {v}" for k, v in sorted(
        ended.items())))
    print(f"  completed requests in the ledger with the tokens and cost the client saw: "
          f"{len(completed) - len(missing) - len(mismatched)} / {len(completed)} "
          f"(missing {len(missing)}, different {len(mismatched)})")
    if other:
        print("  completed in the ledger, not by the client (fault, client outcome): "
              + ", ".join(f"{f}/{k} {v}" for (f, k), v in sorted(other.items())))
    print(f"  cost of completed requests: clients ${client_cost:.6f}, ledger ${ledger_cost:.6f}")
    print(f"  faults injected (metrics): {faults:.0f}")
    print(f"  RSS after warm-up {rss_warm:.1f} MiB, at the end {rss_end:.1f} MiB: "
          f"drift {drift:+.1f}% (target < 10%); over the second half {half_drift:+.1f}%")
    if tally.errors:
        print(f"  unexpected client exceptions: {dict(tally.errors)}")
    print(f"  leaked: turns in flight {leaked_turns:.0f}, our sequences in a batch "
          f"{leaked_slots:.0f} (target 0)")
    print(f"  hung requests (no byte for {READ_TIMEOUT_S:g} s): {sum(tally.hung.values())} "
          f"{dict(tally.hung) or ''}")
    print(f"  frozen replicas (work, no step for >= {FROZEN_AFTER_S:g} s): "
          f"{health['frozen_replicas'] or 'none'}; /readyz unhealthy (polls): "
          f"{health['unready_polls'] or 'none'}")
    print("  server log: " + (", ".join(f"{k} x{v}" for k, v in sorted(
        health["server_log"].items())) or "no tracebacks"))
    print(f"  server exit status after SIGTERM: {code}")
    return {"sent": tally.sent, "outcomes": dict(kinds), "ledger": dict(ended),
            "missing": len(missing), "mismatched": len(mismatched), "rss_warm_mib": rss_warm,
            "rss_end_mib": rss_end, "rss_drift_pct": drift,
            "rss_second_half_drift_pct": half_drift, "client_errors": dict(tally.errors), "leaked_turns": leaked_turns,
            "leaked_slots": leaked_slots, "faults": faults, "exit": code,
            "hung": dict(tally.hung), **health,
            "rss_samples": samples}


async def ledger_bench(n: int = 200_000) -> None:
    """The ledger's cost on the hot path: one append per request, and the batched write."""
    from fastmode.gateway.state import SQLiteState, UsageRow

    tmp = Path(tempfile.mkdtemp(prefix="fastmode-ledger-"))
    state = SQLiteState(tmp / "l.sqlite3", flush_interval_s=3600)
    await state.start()
    rows = [UsageRow(f"req-{i}", time.time(), "k", "frontier", "standard", "standard", "chat",
                     "http", 200, "completed", 100, 0, 200, 0, 200, 0.005) for i in range(n)]
    t0 = time.perf_counter()
    for r in rows:
        state.append_usage(r)
    append_us = (time.perf_counter() - t0) / n * 1e6
    cpu0, t0 = time.process_time(), time.perf_counter()
    await state.flush()
    write_us = (time.perf_counter() - t0) / n * 1e6
    cpu_us = (time.process_time() - cpu0) / n * 1e6
    await state.close()
    print(f"ledger: append_usage {append_us:.2f} us/request on the event loop; the batched "
          f"write {write_us:.2f} us/row wall ({cpu_us:.2f} us CPU) on the writer thread, "
          f"{n} rows")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--disconnects", type=float, default=0.05,
                   help="share of streamed requests whose client leaves mid-stream")
    p.add_argument("--faults", type=float, default=0.06,
                   help="share of requests sent with an x-fastmode-fault header")
    p.add_argument("--warmup", type=float, default=0.3,
                   help="share of the run before the RSS baseline is read (default 0.3)")
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--ledger-bench", action="store_true", help="only the ledger's hot-path cost")
    args = p.parse_args()
    if args.ledger_bench:
        asyncio.run(ledger_bench())
        return
    asyncio.run(ledger_bench())
    out = asyncio.run(soak(args))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
