"""The load generator: schedules chat-completion streams and records what came back.

- Open loop: requests start at given offsets (``--rate`` with Poisson or constant arrivals, or
  a trace's own offsets) whatever the server does with them; each is its own task.
- Closed loop (``--concurrency C``): C users, each sending its next request the moment its
  previous one ends.
- Sending stops after ``requests`` requests or ``duration`` seconds; in-flight ones finish.

One request goes over a transport (``clients.http_transport``: ``http``, ``http-fresh``;
``clients.ws_transport``: ``ws``). A failed request is recorded with its error kind and never
stops the run. ``--workers N`` runs N of these in processes (``clients.worker_processes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from time import perf_counter
from typing import Any, Protocol

import httpx

from fastmode.clients.http_transport import HttpTransport
from fastmode.clients.load_config import LoadConfig, LoadError
from fastmode.clients.progress import Progress
from fastmode.clients.records import Live, RequestResult, RunResult
from fastmode.clients.workload import RequestSpec, Sampler
from fastmode.clients.ws_transport import WsTransport
from fastmode.workload import open_loop_times


class Transport(Protocol):
    """How one request is sent and read (an async context manager around the whole load)."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: Any) -> None: ...

    async def preflight(self) -> None: ...

    def prepare(self, spec: RequestSpec) -> bytes | None: ...

    async def exchange(
        self, spec: RequestSpec, body: bytes | None, res: RequestResult, t0: float, slot: int
    ) -> None: ...


def arrival_offsets(rate: float, arrivals: str, seed: int, phase: float = 0.0) -> Iterator[float]:
    """Open-loop start times from ``phase`` for requests that come without their own arrival
    stream (a trace given ``--rate``): the shared ``workload`` arrival process, own seed."""
    for t in open_loop_times(rate, arrivals, random.Random(seed + 7919)):
        yield t + phase


def make_transport(cfg: LoadConfig, live: Live) -> Transport:
    return WsTransport(cfg, live) if cfg.transport == "ws" else HttpTransport(cfg, live)


class LoadGenerator:
    def __init__(
        self,
        cfg: LoadConfig,
        specs: Iterable[RequestSpec],
        live: Live | None = None,
        ready: Callable[[], None] | None = None,
    ) -> None:
        cfg.validate()
        self.ready = ready  # called after the preflight, just before the clock starts
        self.cfg = cfg
        self.source = specs
        self.specs = iter(specs)
        self.live = live or Live()
        self.results: list[RequestResult] = []
        self.stop = asyncio.Event()
        self.t0 = 0.0
        self.index = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.transport = make_transport(cfg, self.live)

    def _check_route(self, spec: RequestSpec) -> None:
        if spec.tier not in self.cfg.routes:
            raise LoadError(
                f"tier {spec.tier!r} has no route; known: {', '.join(self.cfg.routes)}"
            )

    def _next(self) -> RequestSpec | None:
        if self.stop.is_set():
            return None
        if self.cfg.requests is not None and self.index >= self.cfg.requests:
            return None
        if self.cfg.duration is not None and perf_counter() - self.t0 >= self.cfg.duration:
            return None
        spec = next(self.specs, None)
        if spec is not None:
            self._check_route(spec)
        return spec

    async def run(self) -> RunResult:
        interrupted = False
        send_end = 0.0
        async with self.transport:
            await self.transport.preflight()
            if self.ready is not None:
                self.ready()
            wall0, cpu0, unix0 = perf_counter(), time.process_time(), time.time()
            self.t0 = wall0
            loop = asyncio.get_running_loop()
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGINT, self.stop.set)
            try:
                sender: asyncio.Future[Any]
                if self.cfg.concurrency:
                    users = [self._user(u) for u in range(self.cfg.concurrency)]
                    sender = asyncio.ensure_future(asyncio.gather(*users))
                else:
                    sender = asyncio.ensure_future(self._open_loop())
                stopper: asyncio.Future[Any] = asyncio.ensure_future(self.stop.wait())
                done, _ = await asyncio.wait(
                    {sender, stopper}, return_when=asyncio.FIRST_COMPLETED
                )
                send_end = perf_counter() - self.t0
                if stopper in done:  # Ctrl-C: stop sending, drop what is in flight
                    interrupted = True
                    sender.cancel()
                    for task in list(self.tasks):
                        task.cancel()
                else:
                    stopper.cancel()
                try:
                    with contextlib.suppress(asyncio.CancelledError):
                        await sender
                except BaseException:
                    for task in list(self.tasks):
                        task.cancel()
                    raise
                finally:
                    if self.tasks:
                        await asyncio.gather(*self.tasks, return_exceptions=True)
            finally:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(signal.SIGINT)
        self.results.sort(key=lambda r: r.index)
        return RunResult(
            self.results, send_end, perf_counter() - wall0, time.process_time() - cpu0, unix0,
            interrupted,
        )

    def _timed(self) -> Iterator[tuple[float, RequestSpec]]:
        cfg = self.cfg
        if cfg.replay_offsets:
            return ((s.offset or 0.0, s) for s in self.specs)
        assert cfg.rate is not None
        if isinstance(self.source, Sampler):  # arrivals and requests from one seeded stream
            return self.source.timed(cfg.rate, cfg.arrivals, cfg.phase)
        offsets = arrival_offsets(cfg.rate, cfg.arrivals, cfg.seed, cfg.phase)
        return zip(offsets, self.specs, strict=False)

    async def _open_loop(self) -> None:
        cfg = self.cfg
        for offset, spec in self._timed():
            if cfg.duration is not None and offset > cfg.duration:
                break
            if cfg.requests is not None and self.index >= cfg.requests:
                break
            self._check_route(spec)
            delay = self.t0 + offset - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.stop.is_set():
                break
            idx = self._take()
            task = asyncio.ensure_future(self._one(spec, offset, idx, idx))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _user(self, user: int) -> None:
        while True:
            spec = self._next()
            if spec is None:
                return
            await self._one(spec, None, self._take(), user)

    def _take(self) -> int:
        idx = self.index
        self.index += 1
        return idx

    async def _one(self, spec: RequestSpec, scheduled: float | None, idx: int, slot: int) -> None:
        """Send one request on transport slot ``slot``; record it, whatever happens."""
        live = self.live
        live.sent += 1
        live.inflight += 1
        body = self.transport.prepare(spec)
        t0 = perf_counter()
        res = RequestResult(idx, spec.tier, t0 - self.t0, scheduled, tools=spec.tools,
                            prompt_tokens=spec.prompt_tokens)
        try:
            await self.transport.exchange(spec, body, res, t0, slot)
        except asyncio.CancelledError:
            live.inflight -= 1
            raise
        except (TimeoutError, httpx.TimeoutException):
            res.error, res.detail = "timeout", f"no complete response within {self.cfg.timeout} s"
        except httpx.ConnectError as exc:
            res.error, res.detail = "connect", str(exc)[:200] or type(exc).__name__
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError,
                httpx.CloseError) as exc:
            res.error, res.detail = "disconnect", str(exc)[:200] or type(exc).__name__
        except Exception as exc:  # never let one request end the run
            res.error, res.detail = "client_error", f"{type(exc).__name__}: {exc}"[:200]
        res.end = perf_counter() - t0
        live.inflight -= 1
        live.done += 1
        if res.error:
            live.errors += 1
        self.results.append(res)


async def run_load(
    cfg: LoadConfig, specs: Iterable[RequestSpec], label: str = "bench"
) -> RunResult:
    """Run one load with an optional live progress bar."""
    live = Live()
    gen = LoadGenerator(cfg, specs, live)
    if not cfg.progress:
        return await gen.run()
    progress = asyncio.ensure_future(Progress(cfg, live, label).run())
    try:
        return await gen.run()
    finally:
        progress.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await progress


def new_event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return None
    return uvloop.new_event_loop


def run_sync(cfg: LoadConfig, specs: Iterable[RequestSpec], label: str = "bench") -> RunResult:
    """``run_load`` in a fresh event loop (uvloop when installed)."""
    with asyncio.Runner(loop_factory=new_event_loop_factory()) as runner:
        return runner.run(run_load(cfg, specs, label))
