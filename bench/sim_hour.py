"""A simulated hour of mixed traffic on the default config, in virtual time.

20 requests/s, Poisson arrivals, 2,000-token prompts and 500-token outputs, 70% standard / 20%
fast / 10% spark: the same code as

    fastmode simulate --rate 20 --duration 3600 --prompt-tokens 2000 --output-tokens 500 \\
        --mix standard=0.7,fast=0.2,spark=0.1 --seed 1

Prints wall time, scheduler steps, steps per second, peak RSS and the per-tier summary. The
target (under 10 s of wall time on a 2-core machine) is reported, not asserted.

Usage: python bench/sim_hour.py [--duration S] [--rate R] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from fastmode.backends.engine import build
from fastmode.backends.simulate import LengthDist, Workload, simulate
from fastmode.cli.simulate import print_simulation
from fastmode.gateway.config import load_config

TARGET_WALL_S = 10.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    spec = build(load_config(None).sim())  # the built-in default config's engine
    wl = Workload(
        mix={"standard": 0.7, "fast": 0.2, "spark": 0.1},
        prompt=LengthDist("fixed", 2000),
        output=LengthDist("fixed", 500),
        rate=args.rate,
        duration=args.duration,
        seed=args.seed,
    )
    cpu0 = time.process_time()
    result = simulate(spec, wl)
    cpu = time.process_time() - cpu0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    run = result.run
    if args.json:
        print(json.dumps({**result.to_dict(), "cpu_s": cpu, "peak_rss_mb": rss_mb}, indent=2))
        return 0
    print(
        f"sim_hour: {args.rate:g} req/s Poisson for {args.duration:g} s of virtual time, "
        f"2000-token prompts, 500-token outputs, 70/20/10 standard/fast/spark, seed {args.seed}"
    )
    print(f"cpus available: {len(os.sched_getaffinity(0))}")
    print(f"wall time:        {run['wall_s']:.2f} s (simulation only)")
    print(f"cpu time:         {cpu:.2f} s (of this process; wall exceeds it when others run)")
    print(f"simulated time:   {run['simulated_s']:.1f} s")
    print(f"scheduler steps:  {run['steps']:,}")
    print(f"steps per second: {run['steps_per_s']:,.0f}")
    print(f"requests:         {run['requests']:,} ({run['rejected']:,} rejected)")
    print(f"peak RSS:         {rss_mb:.1f} MB")
    verdict = "met" if run["wall_s"] < TARGET_WALL_S else "NOT met"
    print(f"target < {TARGET_WALL_S:g} s wall on 2 cores: {verdict}")
    print()
    print_simulation(result.to_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
