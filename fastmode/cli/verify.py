"""``fastmode verify``: check a load generator's results against the server's ground truth.

    fastmode serve --trace                       # or requests with x-fastmode-trace: 1
    aiperf profile ... --url http://127.0.0.1:8000 --artifact-dir out/
    fastmode verify out/ --traces http://127.0.0.1:8000 [--since SEQ]

Exit status 0 when every metric the tool reports is within the tolerance of what the server
did (TTFT and E2E: with the client's measured time, unless --strict), 1 when one is not (for a
tool's CI), 2 when nothing could be compared: results verify cannot read, or none of the tool's
requests in the traces. See docs/verify.md.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fastmode.cli._common import UsageError, clean, console, table
from fastmode.clients.verify import truth as truths
from fastmode.clients.verify.compare import NothingCompared, Verdict, compare
from fastmode.clients.verify.tools import TOOLS, Unreadable, read


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "verify", help="check a load generator's results against the server's traces",
        description="Compare TTFT, ITL, TPOT, E2E, output tok/s and request throughput that a "
                    "load generator reported with what fastmode did (its traces: serve --trace "
                    "or x-fastmode-trace: 1), and say where and why the tool is off.")
    p.add_argument("results", help="the tool's results: a file, or its output folder (aiperf's "
                   "artifact directory, inference-perf's report folder)")
    p.add_argument("--traces", required=True,
                   help="the server (URL: GET /v1/fastmode/traces) or a JSONL traces file")
    p.add_argument("--since", type=int, default=0,
                   help="only traces after this seq (the last seq before the run)")
    p.add_argument("--api-key", help="the key the run used (auth on: traces are the key's)")
    p.add_argument("--tool", choices=TOOLS,
                   help="the tool that wrote the results (default: recognised by its files; "
                        "given, it must agree with them)")
    p.add_argument("--tier", help="fastmode bench: compare this tier's row (default: overall)")
    p.add_argument("--rel", type=float, default=2.0, help="tolerance, %% (default 2)")
    p.add_argument("--abs-ms", type=float, default=1.0,
                   help="TTFT and E2E tolerance floor, ms (ITL, TPOT: a tenth; default 1)")
    p.add_argument("--strict", action="store_true",
                   help="TTFT and E2E off by the client's own measured time fail too")
    p.add_argument("--json", metavar="FILE", help="write the verdict as JSON ('-': stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        tool_run = read(args.results, args.tool, args.tier)
    except Unreadable as exc:
        raise UsageError(f"results: {exc}") from None
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise UsageError(f"results: {args.results}: unreadable ({exc!r})") from None
    try:
        server = truths.load(args.traces, args.since, args.api_key)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--traces: {exc}") from None
    if not server:
        raise UsageError("--traces: no traced requests (serve --trace, or x-fastmode-trace: 1)")
    try:
        verdict = compare(tool_run, server, args.rel / 100, args.abs_ms, args.strict)
    except NothingCompared as exc:
        raise UsageError(f"nothing compared: {exc}") from None
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
              f"{v.requests_server} traced, {v.joined} joined by id")
    t = table(["metric", "stat", "tool", "server", "error", "%", "client", "", "why"])
    for r in v.rows:
        t.add_row(r.metric, r.stat, _fmt(r.metric, r.tool), _fmt(r.metric, r.server),
                  _fmt(r.metric, r.error), "–" if r.rel is None else f"{100 * r.rel:+.1f}",
                  "–" if r.client is None else f"{1000 * r.client:+.2f} ms",
                  "[green]ok[/]" if r.ok else "[red]OFF[/]", r.why)
    out.print(t)
    for f in v.findings:
        out.print(f"• {f}")
    out.print("[green]within tolerance[/]" if v.ok else "[red]off past the tolerance[/]")
