"""``fastmode simulate``: a workload on the configured tiers in virtual time, per-tier figures.

``fastmode bench --compare-sim`` runs this command as a subprocess with ``--json``: its flags
and the JSON document are the interface the client side relies on.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from fastmode.backends.engine import EngineSpec
from fastmode.backends.reasoning import EFFORTS
from fastmode.backends.simulate import Workload, simulate
from fastmode.cli._common import UsageError, console, fmt_n, fmt_s, load_engine, print_json, table
from fastmode.cli.sweep import add_arguments as add_sweep_arguments
from fastmode.cli.sweep import print_fleet, run_sweep
from fastmode.workload import ARRIVAL_KINDS, DIST_KINDS, LengthDist, WorkloadError, parse_mix

DEFAULT_MIX = {"standard": 0.7, "fast": 0.2, "spark": 0.1}


def register(subparsers: Any) -> None:
    s = subparsers.add_parser(
        "simulate",
        help="run a workload on the configured tiers in virtual time",
        description=(
            "Generate a workload (open loop at --rate, or closed loop with --concurrency users), "
            "run it in virtual time and print latency percentiles, throughput, batch occupancy "
            "and cost per tier."
        ),
    )
    s.add_argument("--config", help="config file (default: the built-in one)")
    load = s.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="open loop: requests per second (default 1)")
    load.add_argument("--concurrency", type=int, help="closed loop: concurrent users")
    s.add_argument(
        "--duration", type=float, help="seconds of arrivals (default 60; unbounded with --requests)"
    )
    s.add_argument("--requests", type=int, help="stop after this many requests")
    s.add_argument("--prompt-tokens", type=int, default=2000, help="mean prompt length")
    s.add_argument("--output-tokens", type=int, default=500, help="mean output length")
    s.add_argument("--prompt-dist", default="fixed", help=f"one of {', '.join(DIST_KINDS)}")
    s.add_argument("--output-dist", default="fixed", help=f"one of {', '.join(DIST_KINDS)}")
    s.add_argument(
        "--mix", help="tier shares, e.g. standard=0.7,fast=0.2,spark=0.1 (the default)"
    )
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--shared-prefix-tokens", type=int, default=0,
                   help="a system prompt of N tokens every request starts with (prefix cache)")
    s.add_argument("--turns", type=int, default=1,
                   help="closed loop: each user's requests are turns of conversations this "
                   "long, each prompt carrying the conversation so far (prefix cache)")
    s.add_argument(
        "--arrivals", default="poisson", help=f"open loop: {' or '.join(ARRIVAL_KINDS)}"
    )
    s.add_argument(
        "--reasoning-effort", choices=EFFORTS,
        help="every reply thinks first, as long as its tier's model does at this effort "
        "(--output-tokens stays the visible part); adds the visible TTFT rows",
    )
    s.add_argument("--json", action="store_true", help="print one JSON object")
    add_sweep_arguments(s)  # --scenario fast-share, --shares, --fleet (fastmode.cli._sweep)
    s.set_defaults(func=cmd_simulate)


def tier_mix(text: str | None, tiers: dict[str, Any]) -> dict[str, float]:
    """``--mix`` as written (not normalised), or the default: 70/20/10 if the config has the
    three built-in tiers, else every tier alike."""
    if text is None:
        if all(n in tiers for n in DEFAULT_MIX):
            return dict(DEFAULT_MIX)
        return {n: 1.0 for n in tiers}
    return parse_mix(text, known=tiers)


def build_workload(args: argparse.Namespace, spec: EngineSpec) -> Workload:
    """The ``Workload`` the flags describe; ``UsageError`` naming the flag when they are bad."""
    for flag in ("prompt_tokens", "output_tokens"):
        v = getattr(args, flag)
        if v <= 0:
            raise UsageError(f"{flag.replace('_', '-')}: must be > 0, got {v}")
    for flag in ("prompt_dist", "output_dist"):
        v = getattr(args, flag)
        if v not in DIST_KINDS:
            raise UsageError(
                f"{flag.replace('_', '-')}: unknown {v!r}; allowed: {', '.join(DIST_KINDS)}"
            )
    try:
        mix = tier_mix(args.mix, spec.tiers)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    if args.prompt_dist == "fixed":
        for name, share in mix.items():
            window = spec.tiers[name].context_window
            if share > 0 and args.prompt_tokens >= window:
                raise UsageError(
                    f"prompt-tokens: {args.prompt_tokens} does not fit the context window of "
                    f"tier {name} ({window} tokens)"
                )
    rate = args.rate
    if rate is None and args.concurrency is None:
        rate = 1.0
    duration = args.duration
    if duration is None:
        duration = math.inf if args.requests is not None else 60.0
    try:
        return Workload(
            mix=mix,
            prompt=LengthDist(args.prompt_dist, args.prompt_tokens),
            output=LengthDist(args.output_dist, args.output_tokens),
            rate=rate,
            concurrency=args.concurrency,
            duration=duration,
            requests=args.requests,
            arrivals=args.arrivals,
            seed=args.seed,
            shared_prefix_tokens=args.shared_prefix_tokens,
            turns=args.turns,
            reasoning_effort=args.reasoning_effort,
        )
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None


def cmd_simulate(args: argparse.Namespace) -> int:
    spec, _ref = load_engine(args.config)
    wl = build_workload(args, spec)
    if args.scenario == "fast-share":
        return run_sweep(args, spec, wl)
    try:
        result = simulate(spec, wl, fleet_mode=args.fleet)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print_json(result.to_dict())
        return 0
    print_simulation(result.to_dict())
    print_fleet(result.fleet)
    run = result.run
    print(
        f"simulated {run['simulated_s']:.1f} s in {run['wall_s']:.2f} s of wall time; "
        f"{run['steps']:,} scheduler steps ({fmt_n(run['steps_per_s'], 0)} steps/s)",
        file=sys.stderr,
    )
    return 0


def print_simulation(res: dict[str, Any]) -> None:
    """Per-tier table of a ``SimResult.to_dict()``: metrics as rows, tiers as columns."""
    tiers: dict[str, dict[str, Any]] = res["tiers"]
    run = res["run"]
    names = list(tiers)
    load = (
        f"{run['rate']:g} req/s open loop"
        if run["mode"] == "open"
        else f"{run['concurrency']} users closed loop"
    )
    con = console()
    con.print(f"simulate: {load}, seed {run['seed']}")
    t = table(["", *names])

    def row(label: str, f: Any) -> None:
        t.add_row(label, *(f(tiers[n]) for n in names))

    row("requests", lambda d: f"{d['requests']:,}")
    row("completed", lambda d: f"{d['completed']:,}")
    row(
        "rejected",
        lambda d: f"{d['rejected']:,}"
        + (
            " (" + ", ".join(f"{k} {v}" for k, v in d["rejected_by_reason"].items()) + ")"
            if d["rejected"]
            else ""
        ),
    )
    keys = [("ttft_s", "TTFT")]
    if any(d.get("reasoning_tokens") for d in tiers.values()):
        keys.append(("ttft_visible_s", "visible TTFT"))
        row("reasoning tokens / request", lambda d: fmt_n(
            d["reasoning_tokens"] / d["completed"] if d["completed"] else None, 0))
    for key, label in (*keys, ("itl_s", "ITL"), ("e2e_s", "end to end")):
        for q in ("p50", "p90", "p99"):
            row(f"{label} {q}", lambda d, key=key, q=q: fmt_s(d[key][q]))
    row("tok/s per user p50", lambda d: fmt_n(d["output_tokens_per_s_per_user_p50"]))
    row("output tok/s (all users)", lambda d: fmt_n(d["output_tokens_per_s"]))
    row(
        "mean batch / max (bg)",
        lambda d: f"{d['mean_batch']:.1f} / {d['max_batch']} ({d['background_seqs']})",
    )
    row("prefix-cache hit rate", lambda d: fmt_pct(d.get("prefix_cache_hit_rate")))
    row("cost USD", lambda d: f"{d['cost_usd']:,.2f}")
    con.print(t)
    print(
        f"total: {run['requests']:,} requests, {run['rejected']:,} rejected, "
        f"${run['cost_usd']:,.2f} over {run['simulated_s']:.1f} simulated s"
    )


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
