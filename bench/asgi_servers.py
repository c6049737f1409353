"""The bare ASGI app under uvicorn and under granian: is the HTTP layer the floor?

``bench/bare_asgi.py`` — fastmode's recorded bytes replayed at the model's pace, no framework —
served by uvicorn as ``pacing.py`` runs it (uvloop, httptools) and by granian (a Rust HTTP
core: its ASGI interface with lifespan, one worker, a single-threaded runtime with one thread
of each kind, uvloop, HTTP/1 only; ``bare_asgi.py`` says why), the same app, the same captures.
The streams are recorded once from fastmode on the built-in config (``pacing.record``), at one
event per token and at ``stream_interval = 8``, and fastmode is stopped before any run.

Each row runs on both servers in turn (uvicorn, granian, uvicorn... ``--repeat`` times); each
run starts its server afresh, warms it with 200 short requests, measures, and stops it, so only
the server under test is on its core. The server is pinned to one core, this client
(raw sockets, ``stream_client.py``) to the other. The rows, all Chat Completions SSE:

- ``requests``: ``--requests`` streams of 16 tokens, a new connection each, 32 at a time:
  server CPU per request and requests per second;
- ``steady``: 100 streams x ``--tokens`` tokens at one event per token: each stream's rate
  after its first 10% of tokens against the modeled rate (the recorded ``time_info``, as
  ``pacing.py`` judges the bare app), slowest..fastest, the ticker's slips (the app's own
  ``fastmode_host_lag_seconds``) and server CPU per token;
- ``interval8``: 200 streams x ``--tokens`` tokens at 8 tokens per event: the same.

Server CPU is the whole process tree's: every thread of the server process and of every
process below it (granian's main process, its worker, the worker's Rust threads), each
thread's on-CPU nanoseconds from ``/proc/<pid>/task/<tid>/schedstat``. The system part is from
the processes' clock ticks (``/proc/<pid>/stat``, which also hold the time of threads that have
exited); their total beside the schedstat sum checks that no thread was missed. Below the
table: what else the server core did during each run (``/proc/stat``: other processes' and the
kernel's CPU, and the time the host stole from the virtual CPU), the worst run of each server,
so a run disturbed by something else on the machine shows.

granian is not a dependency of fastmode: ``.venv/bin/pip install granian`` to run this.

Usage: python bench/asgi_servers.py [--rows requests,steady,interval8] [--repeat N]
       [--requests N] [--tokens N]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.bare_asgi import GRANIAN_MISSING, SERVERS
from bench.harness import cores, pin_self, run_client, stop
from bench.pacing import Server, rates, record, requests, span, start_bare, start_fastmode, streams

ROWS = ("requests", "steady", "interval8")
STREAMS = {"steady": (100, 1), "interval8": (200, 8)}  # row: (streams, tokens per event)
WARM_UP = 200  # short requests before each run


# -- server CPU: every thread of every process of the tree ---------------------------------

def process_tree(pid: int) -> list[int]:
    """``pid`` and every live process below it (children found by each /proc entry's parent)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


@dataclass(frozen=True)
class TreeCpu:
    """One look at a process tree's CPU: on-CPU nanoseconds per live thread, keyed by
    (pid, tid), and the processes' (all, system) seconds in clock ticks."""

    threads: dict[tuple[int, int], int]
    ticks: tuple[float, float]


def tree_cpu(pid: int) -> TreeCpu:
    threads: dict[tuple[int, int], int] = {}
    tick = os.sysconf("SC_CLK_TCK")
    total = system = 0.0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
        system += int(fields[12]) / tick
        for tid in tids:
            try:
                ns = int(Path(f"/proc/{p}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                continue
            threads[(p, int(tid))] = ns
    return TreeCpu(threads, (total, system))


@dataclass
class CpuMeter:
    """A tree's on-CPU time summed from one look to the next: each live thread's growth since
    the last look (a thread new since then counts from zero). A thread gone between two looks
    takes its last stretch with it: counted in ``lost``."""

    last: dict[tuple[int, int], int] = field(default_factory=dict)
    total_ns: int = 0
    lost: int = 0

    def add(self, look: TreeCpu) -> float:
        """Seconds on CPU so far, with ``look`` taken in."""
        self.total_ns += sum(ns - self.last.get(key, 0) for key, ns in look.threads.items())
        self.lost += len(self.last.keys() - look.threads.keys())
        self.last = dict(look.threads)
        return self.total_ns / 1e9


class TreeServer(Server):
    """A bare app's server measured over its whole process tree, thread by thread."""

    def __init__(self, name: str, port: int, pid: int, path: str) -> None:
        super().__init__(name, port, pid, path)
        self.meter = CpuMeter()
        self.ticks = (0.0, 0.0)
        self.threads = 0

    def cpu(self) -> tuple[float, float]:
        look = tree_cpu(self.pid)
        self.ticks, self.threads = look.ticks, len(look.threads)
        return self.meter.add(look), look.ticks[1]


def core_times(core: int | None) -> tuple[float, float]:
    """(busy, stolen) seconds of ``core`` so far from ``/proc/stat`` (clock ticks; busy: user,
    nice, system, irq, softirq; stolen: the host ran something else on the virtual CPU).
    (0, 0) when the server is not pinned."""
    if core is None:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name == f"cpu{core}":
            v = [int(x) for x in fields]
            return (v[0] + v[1] + v[2] + v[5] + v[6]) / tick, v[7] / tick
    return 0.0, 0.0


def stop_tree(proc: Any) -> None:
    """Stop a server and whatever it started (by pid, those it had when asked to stop)."""
    below = [p for p in process_tree(proc.pid) if p != proc.pid]
    stop(proc)
    for p in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


async def run_once(name: str, captures: Path, itl: float, core: int | None, path: str,
                   measure: Callable[[Server], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """``name``'s server started afresh on the captures, warmed, measured by ``measure``,
    stopped; the row, with the tree's threads, the check of ticks against schedstat and what
    else the core did meanwhile."""
    proc, port = start_bare(captures, itl, core, name)
    try:
        await requests(Server(name, port, proc.pid, "/short"), WARM_UP, 16, 32)
        server = TreeServer(name, port, proc.pid, path)
        (busy0, steal0), sched0, ticks0 = core_times(core), server.cpu()[0], server.ticks[0]
        row = await measure(server)
        sched1, ticks1, (busy1, steal1) = server.cpu()[0], server.ticks[0], core_times(core)
        row.update(threads=server.threads, processes=len(process_tree(proc.pid)),
                   lost=server.meter.lost,
                   ticks_vs_sched=(ticks1 - ticks0) / max(sched1 - sched0, 1e-9),
                   others_ms=max(busy1 - busy0 - (ticks1 - ticks0), 0.0) * 1e3,
                   steal_ms=(steal1 - steal0) * 1e3)
        return row
    finally:
        stop_tree(proc)


# -- the table -------------------------------------------------------------------------------

def ratio(rows: dict[str, list[dict[str, Any]]], key: str) -> str:
    u, g = (statistics.median(r[key] for r in rows[s]) for s in SERVERS)
    return f"{g / u:.2f}×"


def slips(rows: list[dict[str, Any]]) -> str:
    return " / ".join(f"{r['slips']:.0f} ({r['lag_s'] * 1e3:.0f} ms)" for r in rows)


def table(res: dict[str, dict[str, list[dict[str, Any]]]], n_requests: int,
          tokens: int) -> list[str]:
    """The markdown table: a line per figure, uvicorn and granian side by side."""
    out = ["| row | uvicorn | granian | granian / uvicorn |", "|---|---|---|---|"]
    if "requests" in res:
        r = res["requests"]
        u, g = (r[s] for s in SERVERS)
        label = f"requests: {n_requests:,} streams of 16 tokens, 32 at a time"
        out.append(f"| {label}: server CPU µs per request | {span(u, 'cpu_us', '{:.0f}')} | "
                   f"{span(g, 'cpu_us', '{:.0f}')} | {ratio(r, 'cpu_us')} |")
        out.append(f"| … of which the kernel's (system time) | {span(u, 'sys_us', '{:.0f}')} | "
                   f"{span(g, 'sys_us', '{:.0f}')} | {ratio(r, 'sys_us')} |")
        out.append(f"| … requests/s | {span(u, 'per_s', '{:,.0f}')} | "
                   f"{span(g, 'per_s', '{:,.0f}')} | {ratio(r, 'per_s')} |")
    for key, (n, interval) in STREAMS.items():
        if key not in res:
            continue
        r = res[key]
        u, g = (r[s] for s in SERVERS)
        label = f"{key}: {n} streams × {tokens:,} tokens, {interval} per event"
        out.append(f"| {label}: slowest..fastest of modeled | {rates(u)} | {rates(g)} | |")
        out.append(f"| … ticker slips per run (time) | {slips(u)} | {slips(g)} | |")
        out.append(f"| … server CPU µs per token | {span(u, 'cpu_us', '{:.2f}')} | "
                   f"{span(g, 'cpu_us', '{:.2f}')} | {ratio(r, 'cpu_us')} |")
        out.append(f"| … of which the kernel's (system time) | {span(u, 'sys_us', '{:.2f}')} | "
                   f"{span(g, 'sys_us', '{:.2f}')} | {ratio(r, 'sys_us')} |")
    return out


def footer(res: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    """What the CPU sums covered (processes and threads per server, threads lost, ticks
    against schedstat) and what else the server core did meanwhile: other processes' and the
    kernel's CPU and the host's steal, per run (clock ticks: ±10 ms)."""
    parts, disturbed = [], []
    for s in SERVERS:
        rows = [r for by in res.values() for r in by[s]]
        checks = sorted(r["ticks_vs_sched"] for r in rows)
        parts.append(f"{s}: {max(r['processes'] for r in rows)} process(es), "
                     f"{max(r['threads'] for r in rows)} threads, "
                     f"{sum(r['lost'] for r in rows)} gone mid-run, clock ticks / schedstat "
                     f"{checks[0]:.2f}..{checks[-1]:.2f}")
        disturbed.append(f"{s} {max(r['others_ms'] for r in rows):.0f} ms of other CPU, "
                         f"{max(r['steal_ms'] for r in rows):.0f} ms stolen")
    return ("CPU summed over: " + "; ".join(parts) + "\nthe server core besides the server, "
            "at most in a run: " + "; ".join(disturbed))


def require_granian() -> None:
    """Fail at once, in one line naming the install command, when granian is missing."""
    if importlib.util.find_spec("granian") is None:
        raise SystemExit(GRANIAN_MISSING)


def measurement(key: str, n_requests: int, tokens: int
                ) -> tuple[str, Callable[[Server], Awaitable[dict[str, Any]]]]:
    """What row ``key`` asks the app for (its path) and how it measures a server."""
    if key == "requests":
        print(f"requests: {n_requests} x 16 tokens, 32 at a time")
        return "/short", lambda s: requests(s, n_requests, 16, 32)
    n, interval = STREAMS[key]
    print(f"{key}: {n} streams x {tokens} tokens, interval {interval}")
    return "/long", lambda s: streams(s, n, tokens, interval)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--repeat", type=int, default=3, help="runs per server, interleaved")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=1000)
    args = ap.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    if unknown := set(rows) - set(ROWS):
        ap.error(f"unknown rows: {', '.join(sorted(unknown))} (rows: {', '.join(ROWS)})")
    require_granian()
    cpus = cores()
    server_core, client_core = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    pin_self(client_core)
    started = time.perf_counter()
    res: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        caps: dict[int, tuple[Path, float]] = {}
        for interval in sorted({1 if r != "interval8" else 8 for r in rows}):
            proc, fast = start_fastmode(interval, server_core, tmp)
            try:
                caps[interval] = await record(fast, interval, args.tokens, tmp)
            finally:
                stop(proc)
        for key in rows:
            interval = STREAMS[key][1] if key in STREAMS else 1
            path, itl = caps[interval]
            where, measure = measurement(key, args.requests, args.tokens)
            res[key] = {s: [] for s in SERVERS}
            for _ in range(args.repeat):
                for name in SERVERS:
                    row = await run_once(name, path, itl, server_core, where, measure)
                    res[key][name].append(row)
                    print(f"    {name:<8} {row}", flush=True)
    print(f"\nthe bare ASGI app, uvicorn {version('uvicorn')} / granian {version('granian')} "
          f"({time.perf_counter() - started:.0f} s; server on core {server_core}, client on "
          f"core {client_core}; median (range) of {args.repeat} runs each)\n")
    for line in table(res, args.requests, args.tokens):
        print(line)
    print(f"\n{footer(res)}")


if __name__ == "__main__":
    run_client(main)
