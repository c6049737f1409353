"""``fastmode bench``: load-test an OpenAI-compatible server per tier and report what users get.

Wiring only: flags -> workload (``clients.workload`` / ``clients.trace``) -> load
(``clients.loadgen``) -> figures (``clients.metrics``) -> table, JSON and plots
(``clients.report`` / ``clients.plots``); ``--compare-sim`` (``clients.simcompare``) and
``--scenario`` (``clients.scenarios``). Bad input: one line naming the flag, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .loadgen import ARRIVALS, TRANSPORTS, LoadConfig, LoadError
from .metrics import Price, parse_price_table, summarise
from .report import document, print_report, write_json
from .scenarios import DEFAULT_SHARES, SCENARIOS, parse_shares
from .simcompare import SimError
from .trace import TraceError, read_trace
from .workload import (
    DIST_KINDS,
    FlagWorkload,
    LengthDist,
    RequestSpec,
    WorkloadError,
    parse_mix,
    parse_routes,
)

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_REQUESTS = 100


class BenchUsageError(ValueError):
    """Flags that do not go together."""


def register_bench(sub: Any) -> None:
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
    g.add_argument("--scenario", choices=SCENARIOS, help="run a built-in scenario instead")
    g.add_argument("--shares", default=",".join(f"{100 * s:g}" for s in DEFAULT_SHARES),
                   help="fast-share sweep points, percent (default 0,10,25,50)")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        return _bench(args)
    except (WorkloadError, TraceError, LoadError, SimError, BenchUsageError) as exc:
        print(f"fastmode bench: error: {exc}", file=sys.stderr)
        return 2


def _headers(args: argparse.Namespace) -> dict[str, str]:
    headers: dict[str, str] = {}
    for h in args.header:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise BenchUsageError(f"--header: expected NAME:VALUE, got {h!r}")
        headers[name.strip().lower()] = value.strip()
    if args.api_key:
        headers["authorization"] = f"Bearer {args.api_key}"
    return headers


def _prices(args: argparse.Namespace) -> dict[str, Price] | None:
    if not args.price_table:
        return None
    try:
        return parse_price_table(args.price_table)
    except ValueError as exc:
        raise BenchUsageError(str(exc)) from None


def _flag_workload(args: argparse.Namespace, routes: dict[str, Any]) -> FlagWorkload:
    mix = parse_mix(args.mix)
    unknown = [t for t in mix if t not in routes]
    if unknown:
        raise WorkloadError(
            f"--mix: tier {unknown[0]!r} has no route; add --tier {unknown[0]}=MODEL[@PATH] "
            f"(known: {', '.join(routes)})"
        )
    return FlagWorkload(
        mix, LengthDist(args.prompt_dist, args.prompt_tokens),
        LengthDist(args.output_dist, args.output_tokens), args.tools_share, args.seed,
    )


def _bench(args: argparse.Namespace) -> int:
    routes = parse_routes(args.tier, args.model)
    replay = bool(args.trace) and args.rate is None and args.concurrency is None
    requests = args.requests
    if requests is None and args.duration is None and not args.trace:
        requests = DEFAULT_REQUESTS
    cfg = LoadConfig(
        url=args.url, routes=routes, rate=args.rate, concurrency=args.concurrency,
        arrivals=args.arrivals, requests=requests, duration=args.duration, warmup=args.warmup,
        cooldown=args.cooldown, transport=args.transport, timeout=args.timeout,
        headers=_headers(args), ignore_eos=not args.no_ignore_eos,
        strict_stream=args.strict_stream, seed=args.seed, progress=not args.no_progress,
        replay_offsets=replay,
    )
    cfg.validate()
    prices = _prices(args)
    params: dict[str, Any] = {**cfg.params(), "slo_ttft_s": args.slo_ttft,
                              "slo_tpot_s": args.slo_tpot, "price_table": args.price_table}
    if args.workers < 1:
        raise BenchUsageError(f"--workers: must be >= 1, got {args.workers}")
    params["workers"] = args.workers
    wl: FlagWorkload | None = None
    source: Any
    if args.trace:
        if args.scenario or args.compare_sim:
            raise BenchUsageError("--trace: cannot be combined with --scenario or --compare-sim")
        trace: list[RequestSpec] = read_trace(args.trace, routes, need_offset=replay, seed=args.seed)
        source = trace
        params["workload"] = {"trace": args.trace, "requests_in_trace": len(trace)}
    else:
        wl = _flag_workload(args, routes)
        source = wl
        params["workload"] = {
            "mix": wl.mix, "prompt_tokens": vars(wl.prompt), "output_tokens": vars(wl.output),
            "tools_share": wl.tools_share,
        }
    if args.scenario == "fast-share":
        assert wl is not None
        return _fast_share(args, cfg, wl, prices, params)

    from .workers import execute

    rr = execute(cfg, source, args.workers)
    summary = summarise(
        rr.results, warmup=cfg.warmup, cooldown=cfg.cooldown, send_end=rr.send_end,
        slo_ttft=args.slo_ttft, slo_tpot=args.slo_tpot, prices=prices,
    )
    compare_doc, rows = None, None
    if args.compare_sim:
        assert wl is not None
        compare_doc = _compare(args, cfg, wl, summary)
        rows = compare_doc["rows"]
    doc = document(summary, params, rr.generator(), compare_doc)
    print_report(doc, compare_rows=rows)
    if args.json:
        write_json(args.json, doc)
        print(f"JSON report: {args.json}")
    if args.plots:
        from .plots import write_plots

        paths = write_plots(rr.results, args.plots, _title(params))
        print(f"plots: {', '.join(str(p) for p in paths)}")
    return 0


def _compare(args: argparse.Namespace, cfg: LoadConfig, wl: FlagWorkload,
             summary: dict[str, Any]) -> dict[str, Any]:
    from .simcompare import compare, run_simulate, simulate_args

    sim_args = simulate_args(wl, cfg.rate, cfg.concurrency, cfg.duration, cfg.requests,
                             cfg.arrivals, args.sim_config)
    sim = run_simulate(sim_args)
    return {"simulate_args": sim_args, "rows": compare(summary, sim), "simulated": sim}


def _title(params: dict[str, Any], with_mix: bool = True) -> str:
    load = (f"{params['rate']:g} req/s {params['arrivals']}" if params["rate"]
            else f"{params['concurrency']} users" if params["concurrency"] else "trace replay")
    wl = params["workload"]
    if "mix" in wl:
        mix = ", ".join(f"{k} {100 * v:.0f}%" for k, v in wl["mix"].items()) + "; "
        what = f"{mix if with_mix else ''}prompt {wl['prompt_tokens']['mean']}, output {wl['output_tokens']['mean']} tok"
    else:
        what = f"trace {wl['trace']}"
    return f"{load}; {what}"


def _fast_share(args: argparse.Namespace, cfg: LoadConfig, wl: FlagWorkload,
                prices: dict[str, Price] | None, params: dict[str, Any]) -> int:
    from .report import json_safe
    from .scenarios import print_sweep, run_fast_share

    try:
        shares = parse_shares(args.shares)
    except ValueError as exc:
        raise BenchUsageError(str(exc)) from None
    rows, points = run_fast_share(cfg, wl, shares, slo_ttft=args.slo_ttft,
                                  slo_tpot=args.slo_tpot, prices=prices, workers=args.workers)
    print_sweep(rows)
    if args.json:
        doc = {"fastmode_bench": 1, "scenario": "fast-share", "params": params, "rows": rows,
               "points": points}
        write_json(args.json, json_safe(doc))
        print(f"JSON report: {args.json}")
    if args.plots:
        from .plots import plot_fast_share

        path = plot_fast_share(rows, f"{args.plots}/fast_share.png",
                               f"Fast-share sweep at {_title(params, with_mix=False)}")
        print(f"plot: {path}")
    return 0
