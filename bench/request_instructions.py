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

Usage: python bench/request_instructions.py [--requests N] [--root DIR ...] [--keep DIR]
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
from bench.pacing import Server, requests

WARM_UP = 200


def instructions(path: str) -> int:
    """The instructions of one callgrind dump: its ``totals:`` (every thread's)."""
    counts = [int(line.split()[1]) for line in Path(path).read_text(errors="replace")
              .splitlines() if line.startswith(("summary:", "totals:"))]
    if not counts:
        raise RuntimeError(f"no totals in {path}")
    return max(counts)


async def count(root: Path, n: int, tmp: Path, keep: Path | None = None) -> float:
    """User-space instructions per request of the server of checkout ``root``."""
    cfg = tmp / "bench.toml"
    cfg.write_text(bench_config(1, prose(1050)[0]))
    port = free_port()
    out = str(tmp / f"callgrind.{port}")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "--collect-atstart=yes", sys.executable, "-m", "fastmode", "serve", "--port", str(port),
         "--ledger", str(tmp / f"ledger-{port}.sqlite3"), "--log-level", "warning",
         "--config", str(cfg)],
        cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server("fastmode", port, proc.pid, None)
    try:
        wait_healthy(port, proc, timeout=300)
        await requests(server, WARM_UP, 16, 32)  # the pacing table's row, 32 at a time
        # the counters from zero, the requests, then a dump of just those
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                       capture_output=True)
        await requests(server, n, 16, 32)
        subprocess.run(["callgrind_control", "-d", "requests", str(proc.pid)], check=True,
                       capture_output=True)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
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
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    roots = [*args.root, ROOT]
    with tempfile.TemporaryDirectory() as name:
        results = [(root, await count(root, args.requests, Path(name), args.keep)) for root in roots]
    base = results[0][1]
    print(f"| checkout | instructions per request ({args.requests} requests) | vs the first |")
    print("|---|---:|---:|")
    for root, per in results:
        print(f"| {root} | {per:,.0f} | {per / base - 1:+.1%} |")


if __name__ == "__main__":
    asyncio.run(main())
