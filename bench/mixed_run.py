"""A mixed-tier run against a live fastmode, measured beside ``fastmode simulate`` (--compare-sim).

Starts ``fastmode serve`` on a free loopback port, runs ``fastmode bench`` (default: 60 s at
5 req/s Poisson, 70/20/10 standard/fast/spark, 500-token prompts, 200-token outputs), prints its
report (tables, measured vs simulated with relative differences), writes the JSON report and
the plots, and stops the server.

Usage: ``python bench/mixed_run.py [--rate 5] [--duration 60] [--out bench-results/mixed_run]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.harness import ROOT, start_gateway, stop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--mix", default="standard=0.7,fast=0.2,spark=0.1")
    ap.add_argument("--prompt-tokens", type=int, default=500)
    ap.add_argument("--output-tokens", type=int, default=200)
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "mixed_run"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    proc, url = start_gateway()
    try:
        cmd = [
            sys.executable, "-m", "fastmode", "bench", "--url", url, "--rate", str(args.rate),
            "--duration", str(args.duration), "--mix", args.mix,
            "--prompt-tokens", str(args.prompt_tokens),
            "--output-tokens", str(args.output_tokens), "--compare-sim",
            "--json", str(out / "report.json"), "--plots", str(out / "plots"), "--no-progress",
        ]  # fmt: skip
        print("$ fastmode " + " ".join(cmd[3:]), flush=True)
        code = subprocess.call(cmd, cwd=ROOT, env={**os.environ, "COLUMNS": "140"})
    finally:
        stop(proc)
    if code != 0:
        return code
    doc = json.loads((out / "report.json").read_text())
    rows = doc["compare_sim"]["rows"]
    worst = max((r for r in rows if r["relative_difference"] is not None),
                key=lambda r: abs(r["relative_difference"]))
    print(f"largest relative difference: {worst['tier']} {worst['figure']} "
          f"{100 * worst['relative_difference']:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
