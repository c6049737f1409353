"""``fastmode bench``: load-test an OpenAI-compatible server per tier and report what users get.

The command line and the printing only: flags -> a ``clients.bench_run.BenchPlan`` ->
``run_bench`` / ``run_sweep`` -> tables on the terminal, ``--json`` and ``--plots`` files.
Bad input is one line naming the flag, exit status 2 (``UsageError``, see ``commands``).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from fastmode.cli._common import PIPE_WIDTH
from fastmode.clients.bench_run import (
    DEFAULT_REQUESTS,
    BenchPlan,
    flag_workload,
    run_bench,
    run_sweep,
)
from fastmode.clients.load_config import ARRIVALS, TRANSPORTS, LoadConfig, LoadError, parse_headers
from fastmode.clients.report import report_renderables, write_json
from fastmode.clients.scenarios import (
    DEFAULT_SHARES,
    SCENARIOS,
    SWEEP_RATE,
    parse_shares,
    sweep_table,
)
from fastmode.clients.simcompare import SimError
from fastmode.clients.stats import Price, parse_price_table
from fastmode.clients.trace_reader import TraceError, read_trace
from fastmode.clients.workload import DIST_KINDS, LengthDist, WorkloadError, parse_routes

DEFAULT_URL = "http://127.0.0.1:8000"


class UsageError(ValueError):
    """Bad flags: ``fastmode bench: error: ...`` and exit status 2 (see ``commands``)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="load-test a server per tier: TTFT, tokens/s, goodput, cost (table, JSON, plots)",
        description=(
            "Send chat-completion streams to an OpenAI-compatible server (fastmode, vLLM, a "
            "provider), open loop (--rate) or closed loop (--concurrency), and report per-tier "
            "TTFT, inter-token latency, time per output token, end-to-end latency, tokens/s per "
            "user and in aggregate, goodput against SLOs, cost and tool-call validity."
        ),
    )
    g = p.add_argument_group("server")
    g.add_argument("--url", default=DEFAULT_URL, help=f"server root (default {DEFAULT_URL})")
    g.add_argument("--model", help="model id for every tier (non-fastmode servers)")
    g.add_argument("--tier", action="append", default=[], metavar="NAME=MODEL[@PATH]",
                   help="route a tier: model id and base path (repeatable; defaults: "
                        "standard=frontier@/v1, fast=frontier@/fast/v1, spark=frontier-spark@/v1)")
    g.add_argument("--transport", default="http", choices=TRANSPORTS,
                   help="http: pooled connections reused; http-fresh: a new connection per request")
    g.add_argument("--api-key", help="sent as Authorization: Bearer KEY")
    g.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                   help="extra request header (repeatable)")
    g.add_argument("--timeout", type=float, default=600.0, help="per request, seconds (default 600)")
    g.add_argument("--no-ignore-eos", action="store_true",
                   help="do not send ignore_eos (for servers that reject the vLLM extension)")
    g.add_argument("--strict-stream", action="store_true",
                   help="decode every SSE event as JSON (slower; catches more malformed streams)")

    g = p.add_argument_group("load")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--rate", type=float, help="open loop: requests per second")
    mode.add_argument("--concurrency", type=int, help="closed loop: concurrent users")
    g.add_argument("--arrivals", default="poisson", choices=ARRIVALS, help="open-loop arrivals")
    g.add_argument("--requests", type=int,
                   help=f"stop sending after N requests (default {DEFAULT_REQUESTS} without "
                        "--duration)")
    g.add_argument("--duration", type=float, help="stop sending after D seconds")
    g.add_argument("--warmup", type=float, default=0.0,
                   help="seconds at the start whose requests are left out of the figures")
    g.add_argument("--cooldown", type=float, default=0.0,
                   help="seconds at the end whose requests are left out of the figures")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--workers", type=int, default=1,
                   help="generator processes (one core each) for loads one core cannot drive")

    g = p.add_argument_group("workload")
    g.add_argument("--mix", default="standard=1", help="tier shares, e.g. standard=0.7,fast=0.2,spark=0.1")
    g.add_argument("--prompt-tokens", type=int, default=500, help="mean prompt length (tokens)")
    g.add_argument("--prompt-dist", default="fixed", choices=DIST_KINDS)
    g.add_argument("--output-tokens", type=int, default=200, help="mean output length (tokens)")
    g.add_argument("--output-dist", default="fixed", choices=DIST_KINDS)
    g.add_argument("--tools-share", type=float, default=0.0,
                   help="share of requests offering tools (tool_choice required), 0-1")
    g.add_argument("--trace", help="JSONL trace to replay instead (see docs/bench.md)")

    g = p.add_argument_group("figures")
    g.add_argument("--slo-ttft", type=float, help="goodput: TTFT at most this, seconds")
    g.add_argument("--slo-tpot", type=float, help="goodput: time per output token at most, s")
    g.add_argument("--price-table", metavar="TIER=IN:OUT,...",
                   help="$/MTok per tier; otherwise the server's usage.cost_usd")

    g = p.add_argument_group("output")
    g.add_argument("--json", metavar="FILE", help="write every figure and the parameters")
    g.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    g.add_argument("--no-progress", action="store_true", help="no live progress bar")
    g.add_argument("--compare-sim", action="store_true",
                   help="also run fastmode simulate on the same workload; show both")
    g.add_argument("--sim-config", help="config file for --compare-sim (as the server's)")
    g.add_argument("--scenario", choices=SCENARIOS,
                   help=f"run a built-in scenario instead (fast-share: the load once per fast "
                        f"share; without --rate/--concurrency, {SWEEP_RATE:g} req/s)")
    g.add_argument("--shares", default=",".join(f"{100 * s:g}" for s in DEFAULT_SHARES),
                   help="fast-share sweep points, percent (default 0,10,25,50)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        plan = build_plan(args)
        if args.scenario == "fast-share":
            return _sweep(args, plan)
        return _bench(args, plan)
    except (WorkloadError, TraceError, LoadError, SimError) as exc:
        raise UsageError(str(exc)) from None


def console() -> Console:
    """The terminal; a pipe or a file gets the tables' own width instead of rich's 80-column
    squeeze (``_common.PIPE_WIDTH``)."""
    out = Console()
    return out if out.is_terminal else Console(width=PIPE_WIDTH)


def _prices(text: str | None) -> dict[str, Price] | None:
    if not text:
        return None
    try:
        return parse_price_table(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def build_plan(args: argparse.Namespace) -> BenchPlan:
    """Flags -> plan, checked in the order the flags are documented."""
    routes = parse_routes(args.tier, args.model)
    if args.scenario and args.rate is None and args.concurrency is None and not args.trace:
        args.rate = SWEEP_RATE  # the README's `bench --scenario fast-share` needs no load flag
    replay = bool(args.trace) and args.rate is None and args.concurrency is None
    requests = args.requests
    if requests is None and args.duration is None and not args.trace:
        requests = DEFAULT_REQUESTS
    cfg = LoadConfig(
        url=args.url, routes=routes, rate=args.rate, concurrency=args.concurrency,
        arrivals=args.arrivals, requests=requests, duration=args.duration, warmup=args.warmup,
        cooldown=args.cooldown, transport=args.transport, timeout=args.timeout,
        headers=parse_headers(args.header, args.api_key), ignore_eos=not args.no_ignore_eos,
        strict_stream=args.strict_stream, seed=args.seed, progress=not args.no_progress,
        replay_offsets=replay,
    )
    cfg.validate()
    prices = _prices(args.price_table)
    if args.workers < 1:
        raise UsageError(f"--workers: must be >= 1, got {args.workers}")
    common: dict[str, Any] = dict(
        load=cfg, workers=args.workers, slo_ttft=args.slo_ttft, slo_tpot=args.slo_tpot,
        prices=prices, price_table=args.price_table, compare_sim=args.compare_sim,
        sim_config=args.sim_config,
    )
    if args.trace:
        if args.scenario or args.compare_sim:
            raise UsageError("--trace: cannot be combined with --scenario or --compare-sim")
        trace = read_trace(args.trace, routes, need_offset=replay, seed=args.seed)
        return BenchPlan(trace=trace, trace_path=args.trace, **common)
    wl = flag_workload(
        args.mix, routes, LengthDist(args.prompt_dist, args.prompt_tokens),
        LengthDist(args.output_dist, args.output_tokens), args.tools_share, args.seed,
    )
    return BenchPlan(workload=wl, **common)


def _bench(args: argparse.Namespace, plan: BenchPlan) -> int:
    outcome = run_bench(plan)
    rows = outcome.comparison.rows if outcome.comparison is not None else None
    term = console()
    for part in report_renderables(outcome.doc, rows):
        term.print(part)
    if args.json:
        write_json(args.json, outcome.doc)
        print(f"JSON report: {args.json}")
    if args.plots:
        paths = outcome.write_plots(args.plots)
        print(f"plots: {', '.join(str(p) for p in paths)}")
    return 0


def _sweep(args: argparse.Namespace, plan: BenchPlan) -> int:
    try:
        shares = parse_shares(args.shares)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    outcome = run_sweep(plan, shares)
    console().print(sweep_table(outcome.rows))
    if args.json:
        write_json(args.json, outcome.doc)
        print(f"JSON report: {args.json}")
    if args.plots:
        print(f"plot: {outcome.write_plot(args.plots)}")
    return 0
