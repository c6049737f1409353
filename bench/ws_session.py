"""A 20-turn agent session over fresh HTTP, keep-alive HTTP and one websocket.

The session is agent-shaped: short prompts, a tool offered on every turn; a user message makes
the model call the tool, the client sends the tool's output back (``function_call_output``) and
the model answers, then the next user message follows: 20 turns, 10 tool calls. Every
transport speaks the Responses API and continues with ``previous_response_id`` (so all of them
get the same cached-prefix pricing and prefill); only the transport differs:

* fresh HTTP: a new TCP (+ modeled TLS) connection per request;
* keep-alive HTTP: one pooled connection;
* websocket: one socket for the session (its opening is part of the session time).

Run on two servers, ``--emulate-rtt-ms 0`` and ``50``, on the spark, ultrafast and standard
tiers; the table gives the median client-side TTFT over the turns and the median session time
over the sessions, and their ratios to fresh HTTP. Same seeds everywhere, so every cell
generates the same tokens. Loopback only; servers are started here and stopped at the end;
every session is time-bounded.

OpenAI's Codex-Spark numbers (persistent websocket: per-roundtrip overhead -80%, per-token
overhead -30%, TTFT -50%) are checked with two more figures:

* **per-roundtrip overhead** of a turn: the client's TTFT minus the engine's own (the turn's
  ``time_info``: queue wait without the emulated network, plus prefill) -- the network's round
  trips and the request handling, what a transport can save;
* **per-token overhead**: CPU per streamed token, of the server process and of this client,
  for one long spark stream over keep-alive HTTP (SSE) and over the websocket
  (``--token-stream`` tokens, median of 3; CPU time, so it holds on a busy machine).

Usage: python bench/ws_session.py [--sessions N] [--turns T] [--rtt-ms 0 50] [--tiers ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

from bench.harness import cpu_seconds, start_gateway, stop
from fastmode.clients.client import Client

TOOL = {
    "type": "function",
    "name": "run_tests",
    "description": "Run the test suite of a package and report failures",
    "parameters": {
        "type": "object",
        "properties": {"package": {"type": "string"}, "verbose": {"type": "boolean"}},
        "required": ["package"],
    },
}
PROMPTS = ["Run the tests for the gateway.", "Now check the scheduler package.",
           "Try the client library tests.", "Run the backends tests again.",
           "Check the websocket tests once more."]
# tier -> (path prefix, model, extra body fields)
TIERS: dict[str, tuple[str, str, dict[str, str]]] = {
    "spark": ("/v1", "frontier-spark", {}),
    "ultrafast": ("/v1", "frontier", {"service_tier": "ultrafast"}),
    "standard": ("/v1", "frontier", {}),
}
MODES = ("fresh-http", "keepalive-http", "websocket")
ANSWER_TOKENS = 40  # cap on the model's text answers after a tool result
SESSION_TIMEOUT_S = 300.0


def client_for(mode: str, base: str) -> Client:
    if mode == "websocket":
        return Client(base, transport="ws")
    return Client(base, transport="http", api="responses", keepalive=mode == "keepalive-http")


def engine_ttft(time_info: dict[str, float] | None) -> float | None:
    """The engine's part of a turn's TTFT: its queue wait (without the emulated network time
    the gateway charged first) and its prefill."""
    if not time_info:
        return None
    return (time_info["queue_time"] - time_info.get("network_time", 0.0)
            + time_info["prompt_time"])


async def session(base: str, model: str, extra: dict[str, str], mode: str, turns: int,
                  seed: int) -> tuple[list[float], list[float], float]:
    """One agent session; returns (TTFT of every turn, per-roundtrip overhead of every turn,
    session seconds)."""
    ttfts: list[float] = []
    overheads: list[float] = []
    started = time.perf_counter()
    async with client_for(mode, base) as c:
        prev: str | None = None
        pending: list[tuple[str, str]] = []  # tool calls to answer: (call_id, name)
        for i in range(turns):
            if pending:
                items = [{"type": "function_call_output", "call_id": cid,
                          "output": '{"passed": 42, "failed": 0}'} for cid, _ in pending]
                s = await c.complete(items, model=model, tools=[TOOL], max_tokens=ANSWER_TOKENS,
                                     previous_response_id=prev, seed=seed + i, extra=extra)
            else:
                s = await c.complete(PROMPTS[(i // 2) % len(PROMPTS)], model=model,
                                     tools=[TOOL], previous_response_id=prev, seed=seed + i,
                                     max_tokens=256, extra=extra)
            if s.error is not None:
                raise RuntimeError(f"{mode} turn {i}: {s.error.code}: {s.error.message}")
            if s.ttft_s is not None:
                ttfts.append(s.ttft_s)
                engine = engine_ttft(s.time_info)
                if engine is not None:
                    overheads.append(s.ttft_s - engine)
            prev = s.response_id
            pending = [(call.id or "", call.name or "") for call in s.tool_calls.values()]
    return ttfts, overheads, time.perf_counter() - started


async def run_cell(base: str, tier: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    _, model, extra = TIERS[tier]
    ttfts: list[float] = []
    overheads: list[float] = []
    times: list[float] = []
    for k in range(args.sessions):
        async with asyncio.timeout(SESSION_TIMEOUT_S):
            t, o, total = await session(base, model, extra, mode, args.turns, seed=1000 * k)
        ttfts += t
        overheads += o
        times.append(total)
    return {"ttft": statistics.median(ttfts), "session": statistics.median(times),
            "overhead": statistics.median(overheads) if overheads else float("nan")}


async def per_token_cpu(base: str, pid: int, mode: str, tokens: int) -> tuple[float, float]:
    """(server, client) CPU seconds per token of one long spark stream over ``mode``."""
    async with client_for(mode, base + "/v1") as c:
        await c.complete("warm up", model="frontier-spark", max_tokens=4)
        server, client = cpu_seconds(pid), time.process_time()
        async with asyncio.timeout(SESSION_TIMEOUT_S):
            s = await c.complete("Write a long story about a lighthouse keeper.",
                                 model="frontier-spark", max_tokens=tokens, seed=7,
                                 extra={"ignore_eos": True})
        if s.error is not None:
            raise RuntimeError(f"{mode}: {s.error.code}: {s.error.message}")
        n = s.output_tokens or tokens
        return (cpu_seconds(pid) - server) / n, (time.process_time() - client) / n


def fmt_ms(s: float) -> str:
    return f"{s * 1000:8.1f}"


async def main_async(args: argparse.Namespace) -> int:
    servers = [start_gateway("--emulate-rtt-ms", str(r)) for r in args.rtt_ms]
    try:
        results: dict[tuple[float, str, str], dict[str, Any]] = {}
        for (_, base), rtt in zip(servers, args.rtt_ms, strict=True):
            for tier in args.tiers:
                prefix, model, extra = TIERS[tier]
                # warm the server (first-request costs in the process) before measuring
                async with Client(base + prefix, transport="ws") as c:
                    await c.complete("warm up", model=model, max_tokens=4, extra=extra)
                for mode in MODES:
                    results[(rtt, tier, mode)] = await run_cell(base + prefix, tier, mode, args)
        print(f"ws_session: {args.turns}-turn agent session (a tool call every other turn), "
              f"Responses API with previous_response_id; medians, {args.sessions} session(s) "
              "per cell")
        print(f"{'rtt ms':>6} {'tier':<9} {'transport':<15} {'TTFT ms':>8} {'session ms':>10} "
              f"{'TTFT/fresh':>10} {'sess/fresh':>10} {'TTFT/keep':>9} {'sess/keep':>9} "
              f"{'rt ovh ms':>9} {'ovh/fresh':>9}")
        for rtt in args.rtt_ms:
            for tier in args.tiers:
                fresh = results[(rtt, tier, "fresh-http")]
                keep = results[(rtt, tier, "keepalive-http")]
                for mode in MODES:
                    r = results[(rtt, tier, mode)]
                    print(f"{rtt:>6g} {tier:<9} {mode:<15} {fmt_ms(r['ttft'])} "
                          f"{r['session'] * 1000:10.1f} {r['ttft'] / fresh['ttft']:10.2f} "
                          f"{r['session'] / fresh['session']:10.2f} "
                          f"{r['ttft'] / keep['ttft']:9.2f} {r['session'] / keep['session']:9.2f} "
                          f"{fmt_ms(r['overhead']):>9} {r['overhead'] / fresh['overhead']:9.2f}")
        if args.token_stream:
            proc, base = servers[0]
            cpu: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES[1:]}
            for _ in range(3):
                for mode in MODES[1:]:
                    cpu[mode].append(await per_token_cpu(base, proc.pid, mode,
                                                         args.token_stream))
            print(f"per-token overhead: one {args.token_stream}-token spark stream (rtt "
                  f"{args.rtt_ms[0]:g} ms), CPU per token, median of 3")
            print(f"{'transport':<15} {'server us':>9} {'client us':>9} {'total us':>9} "
                  f"{'total/keep':>10}")
            keep_total = None
            for mode in MODES[1:]:
                srv = statistics.median(s for s, _ in cpu[mode]) * 1e6
                cli = statistics.median(c for _, c in cpu[mode]) * 1e6
                keep_total = keep_total or srv + cli
                print(f"{mode:<15} {srv:9.1f} {cli:9.1f} {srv + cli:9.1f} "
                      f"{(srv + cli) / keep_total:10.2f}")
        print("Network model (fastmode/gateway/http/netem.py): fresh HTTPS = TCP 1 RTT + TLS 1.3 1 RTT + "
              "request 1 RTT; kept-alive request = 1 RTT; websocket turn = 1 RTT (+3 RTT once "
              "to open it). Published (OpenAI, Codex-Spark): TTFT -50%, up to ~40% faster "
              "agent runs.")
        return 0
    finally:
        stop(*(proc for proc, _ in servers))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=2, help="sessions per cell (default 2)")
    p.add_argument("--turns", type=int, default=20, help="turns per session (default 20)")
    p.add_argument("--rtt-ms", type=float, nargs="+", default=[0.0, 50.0],
                   help="emulated round trips, one server each (default 0 50)")
    p.add_argument("--tiers", nargs="+", choices=list(TIERS), default=list(TIERS),
                   help="tiers to run (default: all)")
    p.add_argument("--token-stream", type=int, default=2000,
                   help="tokens of the per-token CPU stream (0: skip it; default 2000)")
    args = p.parse_args()
    if args.sessions < 1 or args.turns < 1 or args.token_stream < 0:
        p.error("--sessions and --turns must be at least 1, --token-stream at least 0")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
