"""The fast-share sweep on the default config, fixed fleet and elastic fleet, and its plot.

The same as

    fastmode simulate --scenario fast-share --fleet fixed
    fastmode simulate --scenario fast-share --fleet elastic

(20 req/s, 2,000-token prompts, 500-token replies, 600 s of virtual time per point, seed 1), both
tables, the wall time, and one figure with both fleets: on the fixed fleet the standard tier
gets worse as the fast pool takes its replicas; on the elastic one the node-hours rise instead.

Usage: python bench/fast_share.py [--shares 0,10,25,50] [--duration S] [--plot FILE] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fastmode.backends.engine import build
from fastmode.backends.simulate import LengthDist, Workload
from fastmode.backends.sweep import fast_share_sweep
from fastmode.cli.sweep import print_sweep
from fastmode.clients.report import json_safe
from fastmode.gateway.config import load_config
from fastmode.workload.sweep import parse_shares, sweep_row


def plot(docs: dict[str, dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {mode: [sweep_row(p) for p in doc["points"]] for mode, doc in docs.items()}
    style = {"fixed": ("#c92a2a", "-o"), "elastic": ("#1971c2", "--s")}
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.2))

    def line(ax: Any, mode: str, values: list[float | None], label: str) -> None:
        colour, fmt = style[mode]
        pts = [(100 * r["fast_share"], v) for r, v in zip(rows[mode], values, strict=True)
               if v is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], fmt, color=colour, label=label)

    for mode, rs in rows.items():
        line(axes[0], mode, [r["standard_ttft_p99_s"] for r in rs], f"{mode} fleet")
        line(axes[1], mode, [r["standard_user_tps_p50"] for r in rs], f"{mode} fleet")
        line(axes[3], mode, [r["node_hours"] for r in rs], f"{mode} fleet")
    fixed = rows["fixed"]
    for pool, colour in (("standard", "#495057"), ("fast", "#e8590c")):
        axes[2].plot([100 * r["fast_share"] for r in fixed], [r["replicas"][pool] for r in fixed],
                     "-o", color=colour, label=f"{pool} (fixed fleet)")
    titles = ("standard tier: TTFT p99 (s)", "standard tier: tok/s per user p50",
              "replicas per pool (mean)", "node-hours (B200 + CS-3)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("fast share of our requests (%)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    w = docs["fixed"]["workload"]
    fig.suptitle(f"What fast mode does to everyone else: {w['rate']:g} req/s, "
                 f"{w['duration_s']:g} s per point, the default fleet (10 B200 nodes + 8 CS-3)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shares", default="0,10,25,50")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--plot", default="bench-results/fast_share.png")
    ap.add_argument("--json", help="write both sweeps' documents here")
    args = ap.parse_args()
    spec = build(load_config(None).sim())  # the built-in default config's engine
    base = Workload({"standard": 1.0}, LengthDist("fixed", 2000), LengthDist("fixed", 500),
                    rate=args.rate, duration=args.duration, seed=args.seed)
    shares = parse_shares(args.shares)
    docs = {}
    for mode in ("fixed", "elastic"):
        t0 = time.perf_counter()
        docs[mode] = fast_share_sweep(spec, base, shares, mode)
        wall = time.perf_counter() - t0
        print_sweep(docs[mode])
        print(f"({len(shares)} points of {args.duration:g} simulated s in {wall:.1f} s of wall "
              f"time)\n")
    if args.json:
        Path(args.json).write_text(json.dumps(json_safe(docs), indent=2))
    try:
        print(f"plot: {plot(docs, Path(args.plot))}")
    except ImportError:
        print("plot: matplotlib is not installed (pip install 'fastmode[plots]')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
