"""Instructions per request, counted: the pacing table's ``requests`` row under callgrind.

The ``requests`` row of ``bench/pacing.py`` (server CPU per short streamed request) moves by
±10% between runs on a shared VM, more than any one change to the request path saves. This
counts instead: ``fastmode serve`` runs under valgrind's callgrind (``apt-get install
valgrind``), the same 16-token Chat streams are sent 32 at a time, and the user-space
instructions the server ran for ``--requests`` of them, after a warm-up, are divided by their
number. Two runs of one checkout agree within ~0.3%, so a cut of 1% shows. It counts no kernel
work (the socket writes, ~30% of the request's CPU, the same for the bare app) and no time:
the server runs ~50x slower under callgrind, so streams slip (their pace is not the subject).

``--root DIR`` (repeatable) counts another checkout of fastmode (a ``git worktree`` of the
commit before a change) with the same client and config: before and after in one command.

``--config built-in`` counts on the config a user gets from ``make serve`` (two spark replicas,
the other tenants at half the batch, the mock model's prose) instead of the bench config (one
spark replica, a scripted reply). ``--tokens N`` counts per token instead of per request: the
pacing table's ``steady`` row, ``--streams`` (100) concurrent streams of ``N`` tokens, with
``--interval`` tokens per event (the ``interval8`` row: ``--streams 200 --interval 8``); the
instructions divided by the tokens the streams received. Under callgrind every step is late, so
the replicas slip (one token per stream per step, as at full speed).

Usage: python bench/request_instructions.py [--requests N] [--root DIR ...] [--keep DIR]
       [--config bench|built-in] [--tokens N [--streams S] [--interval K]]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.gateway_overhead import bench_config, prose
from bench.harness import ROOT, free_port, wait_healthy
from bench.pacing import CHAT, PROMPT, Server, builtin_config, requests
from bench.stream_client import stream

WARM_UP = 200


def instructions(path: str) -> int:
    """The instructions of one callgrind dump: its ``totals:`` (every thread's)."""
    counts = [int(line.split()[1]) for line in Path(path).read_text(errors="replace")
              .splitlines() if line.startswith(("summary:", "totals:"))]
    if not counts:
        raise RuntimeError(f"no totals in {path}")
    return max(counts)


async def tokens(server: Server, args: argparse.Namespace) -> int:
    """``--streams`` concurrent streams of ``--tokens`` tokens: the tokens they received (no
    time limit: under callgrind they take minutes)."""
    got = await asyncio.gather(*(stream(server.port, CHAT, PROMPT, args.tokens)
                                 for _ in range(args.streams)))
    n = sum(int(r["tokens"]) for r in got)
    if n != args.streams * args.tokens:
        raise RuntimeError(f"{n} tokens of {args.streams} x {args.tokens}: a stream ended short")
    return n


async def count(root: Path, args: argparse.Namespace, tmp: Path) -> float:
    """User-space instructions per request (per token with ``--tokens``) of the server of
    checkout ``root``."""
    cfg: Path | None = tmp / "bench.toml"
    if args.config == "bench":
        assert cfg is not None
        cfg.write_text(bench_config(args.interval, prose(1050)[0]))
    else:
        cfg = builtin_config(args.interval, tmp)
    port = free_port()
    out = str(tmp / f"callgrind.{port}")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "--collect-atstart=yes", sys.executable, "-m", "fastmode", "serve", "--port", str(port),
         "--ledger", str(tmp / f"ledger-{port}.sqlite3"), "--log-level", "warning",
         *(["--config", str(cfg)] if cfg is not None else [])],
        cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server("fastmode", port, proc.pid, None)
    try:
        wait_healthy(port, proc, timeout=300)
        await requests(server, WARM_UP, 16, 32)  # the pacing table's row, 32 at a time
        if args.tokens:
            await tokens(server, args)
        # the counters from zero, the requests, then a dump of just those
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                       capture_output=True)
        if args.tokens:
            n = await tokens(server, args)
        else:
            n = args.requests
            await requests(server, n, 16, 32)
        subprocess.run(["callgrind_control", "-d", "requests", str(proc.pid)], check=True,
                       capture_output=True)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    keep = args.keep
    if keep is not None:  # for callgrind_annotate
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(out + ".1", keep / f"callgrind.{root.name}")
    return instructions(out + ".1") / n  # the dump after the zeroing: the requests alone


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--root", action="append", type=Path, default=[],
                    help="another checkout to count (before a change); repeatable")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy each checkout's callgrind dump here (callgrind.NAME)")
    ap.add_argument("--config", choices=("bench", "built-in"), default="bench",
                    help="bench: one spark replica, a scripted reply; built-in: `make serve`'s")
    ap.add_argument("--tokens", type=int, default=0,
                    help="count per token: --streams concurrent streams of this many tokens")
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--interval", type=int, default=1, help="the spark tier's stream_interval")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    roots = [*args.root, ROOT]
    with tempfile.TemporaryDirectory() as name:
        results = [(root, await count(root, args, Path(name))) for root in roots]
    base = results[0][1]
    what = (f"per token ({args.streams} streams x {args.tokens}, interval {args.interval})"
            if args.tokens else f"per request ({args.requests} requests)")
    print(f"| checkout | instructions {what}, {args.config} config | vs the first |")
    print("|---|---:|---:|")
    for root, per in results:
        print(f"| {root} | {per:,.0f} | {per / base - 1:+.1%} |")


if __name__ == "__main__":
    asyncio.run(main())
