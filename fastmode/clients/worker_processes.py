"""``--workers N``: split one load over N processes when one core cannot drive it; ``execute``
runs a load in this process or over N.

httpx spends ~14 µs of CPU per HTTP chunk and ~1 ms per request (see docs/bench.md), so one
process tops out near 60-70k one-token chunks/s or ~800-1,000 requests/s. Each worker runs its own
``LoadGenerator`` on 1/N of the load and records its requests exactly as one process would:

- open loop at rate R: N independent arrival processes at R/N (the superposition of Poisson
  processes is Poisson at R; constant arrivals are interleaved by a phase of k/R);
- closed loop with C users: C split over the workers; ``--requests`` split the same way;
- a trace: its lines dealt round-robin, each keeping its offset.

Workers are spawned, build their clients and run the preflight, then wait at a barrier so that
their clocks start together; each reports its Unix start time and the parent shifts its
requests' start times onto one timeline (aligned to well under a millisecond on one host).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing as mp
import os
import queue
import signal
from collections.abc import Sequence
from typing import Any

from fastmode.clients.load_config import LoadConfig, LoadError
from fastmode.clients.loadgen import LoadGenerator, new_event_loop_factory, run_sync
from fastmode.clients.progress import Progress
from fastmode.clients.records import LIVE_FIELDS as FIELDS
from fastmode.clients.records import Live, RunResult
from fastmode.clients.workload import FlagWorkload, RequestSpec, Sampler

STARTUP_TIMEOUT_S = 60.0
PUBLISH_S = 0.2  # how often a worker publishes its live counters


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


def plan(
    cfg: LoadConfig, source: FlagWorkload | Sequence[RequestSpec], workers: int
) -> list[tuple[LoadConfig, FlagWorkload | list[RequestSpec]]]:
    """The (config, workload) of each worker; fewer workers when there is too little to split."""
    n = workers
    if cfg.concurrency is not None:
        n = min(n, cfg.concurrency)
    if cfg.requests is not None:
        n = min(n, cfg.requests)
    if not isinstance(source, FlagWorkload):
        n = min(n, len(source))
    n = max(1, n)
    users = _split(cfg.concurrency, n) if cfg.concurrency is not None else [None] * n
    counts = _split(cfg.requests, n) if cfg.requests is not None else [None] * n
    out: list[tuple[LoadConfig, FlagWorkload | list[RequestSpec]]] = []
    for k in range(n):
        part = dataclasses.replace(
            cfg,
            concurrency=users[k],
            requests=counts[k],
            rate=cfg.rate / n if cfg.rate is not None else None,
            phase=(k / cfg.rate if cfg.rate is not None and cfg.arrivals == "constant" else 0.0),
            seed=cfg.seed + 1009 * k,
            progress=False,
        )
        if isinstance(source, FlagWorkload):
            wl: FlagWorkload | list[RequestSpec] = dataclasses.replace(
                source, seed=source.seed + 1009 * k)
        else:
            wl = list(source[k::n])
        out.append((part, wl))
    return out


def _worker(
    k: int,
    cfg: LoadConfig,
    source: FlagWorkload | list[RequestSpec],
    barrier: Any,
    counters: Any,
    results: Any,
) -> None:
    """One worker process: run its share, publish live counters, send back its records."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent forwards SIGTERM on Ctrl-C

    async def main() -> RunResult:
        live = Live()
        specs = Sampler(source) if isinstance(source, FlagWorkload) else source
        gen = LoadGenerator(cfg, specs, live, ready=lambda: barrier.wait(STARTUP_TIMEOUT_S))
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, gen.stop.set)

        async def publish() -> None:
            while True:
                for i, name in enumerate(FIELDS):
                    counters[k * len(FIELDS) + i] = getattr(live, name)
                await asyncio.sleep(PUBLISH_S)

        task = asyncio.ensure_future(publish())
        try:
            return await gen.run()
        finally:
            task.cancel()

    try:
        with asyncio.Runner(loop_factory=new_event_loop_factory()) as runner:
            rr = runner.run(main())
        results.put((k, "ok", rr, rr.started_at))
    except BaseException as exc:  # report, never hang the parent
        with contextlib.suppress(Exception):
            barrier.abort()
        results.put((k, "error", f"{type(exc).__name__}: {exc}", 0.0))


def merge(parts: list[tuple[RunResult, float]]) -> RunResult:
    """One timeline: shift each worker's start times by its clock start, renumber requests."""
    origin = min(started for _, started in parts)
    results = []
    send_end = wall = cpu = 0.0
    for rr, started in parts:
        shift = started - origin
        for r in rr.results:
            r.start += shift
            if r.scheduled is not None:
                r.scheduled += shift
            results.append(r)
        send_end = max(send_end, rr.send_end + shift)
        wall = max(wall, rr.wall_s + shift)
        cpu += rr.cpu_s
    results.sort(key=lambda r: r.start)
    for i, r in enumerate(results):
        r.index = i
    busiest = max(rr.cpu_s / rr.wall_s if rr.wall_s > 0 else 0.0 for rr, _ in parts)
    return RunResult(results, send_end, wall, cpu, origin,
                     any(rr.interrupted for rr, _ in parts), len(parts), busiest)


async def run_workers(
    cfg: LoadConfig, source: FlagWorkload | Sequence[RequestSpec], workers: int,
    label: str = "bench",
) -> RunResult:
    cfg.validate()
    shares = plan(cfg, source, workers)
    ctx = mp.get_context("spawn")
    n = len(shares)
    barrier = ctx.Barrier(n + 1)
    counters = ctx.Array("d", n * len(FIELDS), lock=False)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(k, c, wl, barrier, counters, results), daemon=True)
             for k, (c, wl) in enumerate(shares)]
    for p in procs:
        p.start()
    loop = asyncio.get_running_loop()
    live = Live()
    progress = None

    def stop_workers() -> None:
        for p in procs:
            if p.is_alive() and p.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, stop_workers)
    try:
        try:
            await loop.run_in_executor(None, barrier.wait, STARTUP_TIMEOUT_S)
        except Exception:
            pass  # a worker failed to start: its error is in the queue
        if cfg.progress:
            progress = asyncio.ensure_future(Progress(cfg, live, label).run())
        got: list[tuple[RunResult, float]] = []
        errors: list[str] = []
        while len(got) + len(errors) < n:
            for i, name in enumerate(FIELDS):
                setattr(live, name, int(sum(counters[k * len(FIELDS) + i] for k in range(n))))
            try:
                k, status, payload, started = await loop.run_in_executor(
                    None, results.get, True, 0.2)
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and results.empty():
                    errors.append("a worker process died")
                continue
            if status == "ok":
                got.append((payload, started))
            else:
                errors.append(f"worker {k}: {payload}")
        if errors:
            raise LoadError(f"--workers: {errors[0]}")
        return merge(got)
    finally:
        if progress is not None:
            progress.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await progress
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()


def run_workers_sync(
    cfg: LoadConfig, source: FlagWorkload | Sequence[RequestSpec], workers: int,
    label: str = "bench",
) -> RunResult:
    return asyncio.run(run_workers(cfg, source, workers, label))


def execute(
    cfg: LoadConfig, source: FlagWorkload | Sequence[RequestSpec], workers: int = 1,
    label: str = "bench",
) -> RunResult:
    """Run a load in this process, or over ``workers`` processes."""
    if workers <= 1:
        specs = Sampler(source) if isinstance(source, FlagWorkload) else source
        return run_sync(cfg, specs, label)
    return run_workers_sync(cfg, source, workers, label)
