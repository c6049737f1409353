"""``fastmode simulate --scenario fast-share``: the sweep in virtual time, its table and JSON.

What a growing fast share does to everyone else (``backends.sweep``): per share, the standard
and fast tiers' TTFT and speed, rejections, the fleet's replicas per pool, node-hours, revenue
and the provider's cost. ``fastmode bench --scenario fast-share`` measures the same points on a
live server and prints the same table (``workload.sweep.sweep_row`` reads both documents).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from fastmode.backends.engine import EngineSpec
from fastmode.backends.simulate import Workload
from fastmode.backends.sweep import fast_share_sweep
from fastmode.cli._common import UsageError, console, fmt_n, fmt_s, print_json, table
from fastmode.workload import WorkloadError
from fastmode.workload.sweep import DEFAULT_SHARES, parse_shares, sweep_row

SCENARIOS = ("fast-share",)
SWEEP_RATE = 20.0  # req/s when the flags give no load: near the default fleet's capacity
SWEEP_DURATION_S = 600.0


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--scenario", choices=SCENARIOS,
                   help="fast-share: the same load once per fast share (default rate 20 req/s "
                        "for 600 s, standard=1 plus the fast share)")
    s.add_argument("--shares", default=",".join(f"{100 * x:g}" for x in DEFAULT_SHARES),
                   help="fast-share sweep points, percent (default 0,10,25,50)")
    s.add_argument("--fleet", choices=("fixed", "elastic"),
                   help="override the config's node bounds: fixed (nodes = count) or elastic "
                        "(the autoscaler may rent up to max_count, or 2 x count)")


def sweep_workload(args: argparse.Namespace, wl: Workload) -> Workload:
    """The flags' workload with the sweep's defaults where the flags said nothing."""
    changes: dict[str, Any] = {}
    if args.rate is None and args.concurrency is None:
        changes["rate"] = SWEEP_RATE
    if args.duration is None and args.requests is None:
        changes["duration"] = SWEEP_DURATION_S
    if args.mix is None:
        changes["mix"] = {"standard": 1.0}
    return dataclasses.replace(wl, **changes)


def run_sweep(args: argparse.Namespace, spec: EngineSpec, wl: Workload) -> int:
    try:
        shares = parse_shares(args.shares)
        doc = fast_share_sweep(spec, sweep_workload(args, wl), shares, args.fleet)
    except (WorkloadError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print_json(doc)
    else:
        print_sweep(doc)
    return 0


def print_fleet(fleet: dict[str, Any] | None) -> None:
    """One line on what the run did to the fleet (``simulate``'s table leaves it out)."""
    if not fleet:
        return
    pools = " / ".join(f"{n} {p['replicas_mean']:.1f}" for n, p in fleet["pools"].items())
    moves = sum(p["moves_in"] for p in fleet["pools"].values())
    rev = fleet["revenue_usd"]
    print(f"fleet ({fleet['policy']}{', elastic' if fleet['elastic'] else ''}): replicas "
          f"{pools}, {moves} moved; {fleet['node_hours']:.2f} node-hours, provider cost "
          f"${fleet['cost_usd']:,.2f}; revenue ${rev['users']:,.2f} yours + "
          f"${rev['tenants']:,.2f} the other tenants'")


def _replicas(row: dict[str, Any]) -> str:
    return " / ".join(f"{n} {fmt_n(v)}" for n, v in row["replicas"].items() if v is not None)


def print_sweep(doc: dict[str, Any]) -> None:
    """One row per fast share: what the standard tier, the fast tier and the fleet got."""
    rows = [sweep_row(p) for p in doc["points"]]
    w = doc["workload"]
    load = f"{w['rate']:g} req/s" if w["rate"] is not None else f"{w['concurrency']} users"
    con = console()
    if not con.is_terminal:
        con.width = 200  # a pipe or a file gets the whole table, not an 80-column squeeze
    con.print(
        f"fast-share sweep ({doc['fleet_mode']} fleet): {load} for {w['duration_s']:g} s, "
        f"prompt {w['prompt']['mean']} / output {w['output']['mean']} tokens, seed {w['seed']}"
    )
    t = table(["fast share", "std TTFT p50", "std TTFT p99", "std tok/s", "fast TTFT p50",
               "fast TTFT p99", "fast tok/s", "rejected", "replicas (mean)", "node-h",
               "revenue $", "cost $"])
    for r in rows:
        t.add_row(
            f"{100 * r['fast_share']:g}%", fmt_s(r["standard_ttft_p50_s"]),
            fmt_s(r["standard_ttft_p99_s"]), fmt_n(r["standard_user_tps_p50"]),
            fmt_s(r["fast_ttft_p50_s"]), fmt_s(r["fast_ttft_p99_s"]),
            fmt_n(r["fast_user_tps_p50"]), f"{r['rejected']:,}", _replicas(r),
            fmt_n(r["node_hours"], 2), fmt_n(r["revenue_usd"], 0),
            fmt_n(r["provider_cost_usd"], 0),
        )
    con.print(t)
