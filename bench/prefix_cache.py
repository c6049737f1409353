"""Prefix caching on a multi-turn agent trace, in virtual time: hit rate and TTFT reduction.

The trace: ``--sessions`` coding-agent sessions start at Poisson times; each runs ``--turns``
turns. Every session shares one system prompt and tool set (~3,000 tokens, as agents of one
product do); each turn the model answers with a tool call (~60 tokens), the tool's result
(~400 tokens of log output) is appended and the next turn is sent ``--think`` seconds after the
reply ended. The prompts are real chat messages and their cache keys come from the gateway's
own code (``gateway.values.caching``: OpenAI's automatic caching, 128-token steps from 1,024 tokens),
so the bench measures what the server does.

The same trace runs on the default config's standard and fast deployments three ways:
prefix caching off, on with least-loaded routing, and on with prefix-aware routing (the
default). Printed per tier: prefix-cache hit rate (cached / prompt tokens), TTFT p50 / p90 /
mean, and the TTFT reduction against no caching. Targets are reported, not asserted.

Usage: python bench/prefix_cache.py [--sessions N] [--turns K] [--rate R] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

from fastmode.backends.drivers import Arrival, VirtualDriver
from fastmode.backends.engine import build
from fastmode.backends.prefix_cache import CacheRouting
from fastmode.backends.scheduler import Sequence
from fastmode.backends.tokenizer import count_chat_prompt
from fastmode.gateway.config import load_config
from fastmode.gateway.values.caching import chat_units, openai_prefix

WORDS = ("build test cache kernel batch token queue prefill decode replica shard latency "
         "error warning passed failed module import request stream").split()
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} in the repository",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                    "args": {"type": "string"}}}}}
    for name in ("read_file", "run_tests", "edit_file", "search")]


def text(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(int(tokens / 1.1)))


def session(sid: int, system: str, turns: int, model: str, seed: int) -> list[tuple[int, Any]]:
    """One agent conversation: (prompt tokens, cache key) of each turn. Each turn the model
    called a tool and its result came back as the next turn's input."""
    rng = random.Random(seed * 1000 + sid)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Task {sid}: " + text(rng, 80)}]
    out = []
    for turn in range(turns):
        prompt = count_chat_prompt(messages, TOOLS)
        out.append((prompt, openai_prefix(chat_units(messages, TOOLS), model,
                                          prompt_tokens=prompt)))
        call = {"id": f"call_{sid}_{turn}", "type": "function",
                "function": {"name": "run_tests", "arguments": json.dumps(
                    {"path": "tests/", "args": text(rng, 40)})}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"],
                         "content": text(rng, 400)})
    return out


def trace(args: argparse.Namespace, model: str) -> list[list[tuple[int, Any]]]:
    system = "You are a coding agent. " + text(random.Random(args.seed), 2600)
    return [session(i, system, args.turns, model, args.seed) for i in range(args.sessions)]


def run(variant: str, tier: str, args: argparse.Namespace,
        sessions: list[list[tuple[int, Any]]]) -> dict[str, Any]:
    spec = build(load_config().sim())
    dep = spec.deployments[spec.tiers[tier].deployment.name]
    if variant == "off":
        dep = replace(dep, limits=replace(dep.limits, prefix_caching=False),
                      routing=CacheRouting(prefer_cached=False))
    elif variant == "least-loaded":
        dep = replace(dep, routing=CacheRouting(prefer_cached=False))
    rate = args.rate if tier == "standard" else args.fast_rate
    rng = random.Random(args.seed)
    ttft: list[float] = []
    cached = prompt = 0
    driver = VirtualDriver({dep.name: dep})

    def submit(sid: int, turn: int, t: float) -> None:
        p, key = sessions[sid][turn]
        driver.push(Arrival(t, dep.name, p, 60, tag=(sid, turn), prefix=key))

    def finished(seq: Sequence) -> None:
        nonlocal cached, prompt
        ttft.append(seq.first_token_at - seq.arrival)
        cached += seq.cached_tokens
        prompt += seq.prompt_tokens
        sid, turn = seq.tag
        if turn + 1 < len(sessions[sid]):
            submit(sid, turn + 1, seq.finished_at + args.think)

    driver.on_finish = finished
    t = 0.0
    for sid in range(len(sessions)):
        t += rng.expovariate(rate)
        submit(sid, 0, t)
    wall = time.perf_counter()
    driver.run((), feedback=True)
    wall = time.perf_counter() - wall
    q = statistics.quantiles(ttft, n=10)
    return {"variant": variant, "tier": tier, "requests": len(ttft),
            "hit_rate": cached / prompt if prompt else 0.0,
            "ttft_p50_s": statistics.median(ttft), "ttft_p90_s": q[8],
            "ttft_mean_s": statistics.fmean(ttft), "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--rate", type=float, default=1.0,
                    help="standard tier: sessions started per second")
    ap.add_argument("--fast-rate", type=float, default=0.1,
                    help="fast tier (a 16-slot pool): sessions started per second")
    ap.add_argument("--think", type=float, default=1.0, help="tool time between turns, s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sessions = trace(args, build(load_config().sim()).tiers["standard"].model)
    rows = [run(v, tier, args, sessions) for tier in ("standard", "fast")
            for v in ("off", "least-loaded", "prefix-aware")]
    base = {r["tier"]: r for r in rows if r["variant"] == "off"}
    for r in rows:
        b = base[r["tier"]]
        r["ttft_p50_reduction"] = 1 - r["ttft_p50_s"] / b["ttft_p50_s"]
        r["ttft_mean_reduction"] = 1 - r["ttft_mean_s"] / b["ttft_mean_s"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"agent trace: {args.sessions} sessions x {args.turns} turns, {args.rate:g} "
          f"sessions/s (fast: {args.fast_rate:g}), {args.think:g} s between turns, "
          f"seed {args.seed}")
    print(f"{'tier':9} {'variant':13} {'requests':>8} {'hit rate':>9} {'TTFT p50':>10} "
          f"{'TTFT p90':>10} {'mean':>9} {'p50 cut':>8} {'mean cut':>9}")
    for r in rows:
        print(f"{r['tier']:9} {r['variant']:13} {r['requests']:8d} {100 * r['hit_rate']:8.1f}% "
              f"{1e3 * r['ttft_p50_s']:8.1f}ms {1e3 * r['ttft_p90_s']:8.1f}ms "
              f"{1e3 * r['ttft_mean_s']:7.1f}ms {100 * r['ttft_p50_reduction']:7.1f}% "
              f"{100 * r['ttft_mean_reduction']:8.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
