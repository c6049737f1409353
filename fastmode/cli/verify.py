"""``fastmode verify``: check a load generator's results against the server's ground truth.

    fastmode serve --trace                       # or requests with x-fastmode-trace: 1
    aiperf profile ... --url http://127.0.0.1:8000 --artifact-dir out/
    fastmode verify out/ --traces http://127.0.0.1:8000 [--since SEQ]

Exit status 0 when every metric the tool reports is within the tolerance of what the server
did, 1 when one is not (for a tool's CI), 2 for bad input. See docs/verify.md.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from clients.verify import truth as truths
from clients.verify.compare import Verdict, compare
from clients.verify.tools import read

from ._common import UsageError, clean, console, table

TOOLS = ("fastmode", "aiperf", "guidellm", "vllm", "inference-perf")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "verify", help="check a load generator's results against the server's traces",
        description="Compare TTFT, ITL, TPOT, E2E, output tok/s and request throughput that a "
                    "load generator reported with what fastmode did (its traces: serve --trace "
                    "or x-fastmode-trace: 1), and say where and why the tool is off.")
    p.add_argument("results", help="the tool's results file (aiperf: its artifact directory "
                   "or profile_export_aiperf.json)")
    p.add_argument("--traces", required=True,
                   help="the server (URL: GET /v1/fastmode/traces) or a JSONL traces file")
    p.add_argument("--since", type=int, default=0,
                   help="only traces after this seq (the last seq before the run)")
    p.add_argument("--api-key", help="the key the run used (auth on: traces are the key's)")
    p.add_argument("--tool", choices=TOOLS, help="the results' format (default: detected)")
    p.add_argument("--tier", help="fastmode bench: compare this tier's row (default: overall)")
    p.add_argument("--rel", type=float, default=2.0, help="tolerance, %% (default 2)")
    p.add_argument("--abs-ms", type=float, default=1.0,
                   help="TTFT and E2E tolerance floor, ms (ITL, TPOT: a tenth; default 1)")
    p.add_argument("--json", metavar="FILE", help="write the verdict as JSON ('-': stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        tool_run = read(args.results, args.tool, args.tier)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"results: {exc}") from None
    try:
        server = truths.load(args.traces, args.since, args.api_key)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--traces: {exc}") from None
    if not server:
        raise UsageError("--traces: no traced requests (serve --trace, or x-fastmode-trace: 1)")
    verdict = compare(tool_run, server, args.rel / 100, args.abs_ms)
    if args.json:
        text = json.dumps(clean(verdict.as_dict()), indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    if args.json != "-":
        show(verdict)
    return 0 if verdict.ok else 1


def _fmt(metric: str, x: float) -> str:
    if metric in ("ttft", "itl", "tpot", "e2e"):
        return f"{x * 1000:.2f} ms"
    return f"{x:,.2f}"


def show(v: Verdict) -> None:
    out = console()
    out.width = max(out.width, 150)  # the table is wide; a pipe gets it whole
    out.print(f"[bold]{v.tool}[/] ({v.source}): {v.requests_tool} requests in its records, "
              f"{v.requests_server} traced, {v.joined} joined by request id")
    t = table(["metric", "stat", "tool", "server", "error", "%", "", "why"])
    for r in v.rows:
        t.add_row(r.metric, r.stat, _fmt(r.metric, r.tool), _fmt(r.metric, r.server),
                  _fmt(r.metric, r.error), "–" if r.rel is None else f"{100 * r.rel:+.1f}",
                  "[green]ok[/]" if r.ok else "[red]OFF[/]", r.why)
    out.print(t)
    for f in v.findings:
        out.print(f"• {f}")
    out.print("[green]within tolerance[/]" if v.ok else "[red]off past the tolerance[/]")
