"""The load generator: sends chat-completion streams over httpx and records what came back.

- Open loop: requests start at given offsets (``--rate`` with Poisson or constant arrivals, or
  a trace's own offsets) whatever the server does with them; each is its own task.
- Closed loop (``--concurrency C``): C users, each sending its next request the moment its
  previous one ends.
- Sending stops after ``requests`` requests or ``duration`` seconds; in-flight ones finish.

Transports: ``http`` (one pooled client, connections reused) and ``http-fresh`` (a new
connection per request). A failed request is recorded with its error kind and never stops the
run. The hot path per network chunk is ``perf_counter()`` plus ``StreamParser.feed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from .records import RequestResult, ToolCallRecord
from .sse import StreamParser
from .workload import RequestSpec, Route

TRANSPORTS = ("http", "http-fresh", "ws")
POOL_SIZE = 8  # closed loop: users per pooled client
MAX_POOLS = 128
OPEN_LOOP_POOLS = 16
ARRIVALS = ("poisson", "constant")


class LoadError(ValueError):
    """The load parameters are invalid; the message names the flag."""


@dataclass
class LoadConfig:
    url: str
    routes: dict[str, Route]
    rate: float | None = None
    concurrency: int | None = None
    arrivals: str = "poisson"
    requests: int | None = None
    duration: float | None = None
    warmup: float = 0.0
    cooldown: float = 0.0
    transport: str = "http"
    timeout: float = 600.0  # per request, whole response
    connect_timeout: float = 10.0
    headers: dict[str, str] = field(default_factory=dict)
    ignore_eos: bool = True
    strict_stream: bool = False
    seed: int = 1
    progress: bool = True
    replay_offsets: bool = False  # open loop at the trace's own offsets
    phase: float = 0.0  # open loop: shift of every arrival (worker k of N: k / total rate)

    def validate(self) -> None:
        modes = sum(x is not None for x in (self.rate, self.concurrency)) + self.replay_offsets
        if modes != 1:
            raise LoadError("--rate/--concurrency: give exactly one (a trace replays its offsets)")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise LoadError(f"--rate: must be > 0, got {self.rate}")
        if self.concurrency is not None and self.concurrency <= 0:
            raise LoadError(f"--concurrency: must be > 0, got {self.concurrency}")
        if self.requests is not None and self.requests <= 0:
            raise LoadError(f"--requests: must be > 0, got {self.requests}")
        if self.duration is not None and not self.duration > 0:
            raise LoadError(f"--duration: must be > 0, got {self.duration}")
        if self.requests is None and self.duration is None and not self.replay_offsets:
            raise LoadError("give --requests N or --duration SECONDS")
        for name in ("warmup", "cooldown"):
            if getattr(self, name) < 0:
                raise LoadError(f"--{name}: must be >= 0")
        if self.duration is not None and self.warmup + self.cooldown >= self.duration:
            raise LoadError("--warmup + --cooldown: must be shorter than --duration")
        if self.arrivals not in ARRIVALS:
            raise LoadError(f"--arrivals: unknown {self.arrivals!r}; allowed: poisson, constant")
        if self.transport not in TRANSPORTS:
            raise LoadError(
                f"--transport: unknown {self.transport!r}; allowed: {', '.join(TRANSPORTS)}"
            )
        if not self.timeout > 0:
            raise LoadError(f"--timeout: must be > 0, got {self.timeout}")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise LoadError(f"--url: expected http(s)://host[:port], got {self.url!r}")

    def base_url(self) -> str:
        """The server root: a trailing ``/v1`` is dropped (tier routes carry their own path)."""
        url = self.url.rstrip("/")
        return url[:-3] if url.endswith("/v1") else url

    def params(self) -> dict[str, Any]:
        return {
            "url": self.url, "routes": {k: vars(v) for k, v in self.routes.items()},
            "mode": "closed" if self.concurrency else "open", "rate": self.rate,
            "concurrency": self.concurrency,
            "arrivals": "trace" if self.replay_offsets else self.arrivals,
            "requests": self.requests, "duration_s": self.duration, "warmup_s": self.warmup,
            "cooldown_s": self.cooldown, "transport": self.transport, "timeout_s": self.timeout,
            "ignore_eos": self.ignore_eos, "strict_stream": self.strict_stream, "seed": self.seed,
        }  # fmt: skip


@dataclass
class Live:
    """Counters the progress display reads (updated by the request tasks)."""

    sent: int = 0
    done: int = 0
    errors: int = 0
    tokens: int = 0
    inflight: int = 0


@dataclass
class RunResult:
    results: list[RequestResult]
    send_end: float  # seconds from the run start when sending stopped
    wall_s: float
    cpu_s: float  # the generator's own CPU time (process), to check it was not the bottleneck
    started_at: float  # Unix time of the run start
    interrupted: bool = False
    workers: int = 1
    busiest_worker_cpu: float | None = None  # with workers: the busiest one's CPU share

    def generator(self) -> dict[str, Any]:
        lags = sorted(r.start - r.scheduled for r in self.results if r.scheduled is not None)
        util = self.cpu_s / self.wall_s if self.wall_s > 0 else None
        return {
            "workers": self.workers,
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "cpu_utilisation": util if self.workers == 1 else self.busiest_worker_cpu,
            "schedule_lag_p99_s": lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)]
            if lags else None,
            "schedule_lag_max_s": lags[-1] if lags else None,
            "interrupted": self.interrupted,
        }


def arrival_offsets(rate: float, arrivals: str, seed: int, phase: float = 0.0) -> Iterator[float]:
    """Open-loop start times from ``phase``: Poisson (exponential gaps) or evenly spaced."""
    rng = random.Random(seed + 7919)
    t, n = 0.0, 0
    while True:
        if arrivals == "poisson":
            t += rng.expovariate(rate)
        else:
            t = n / rate
        n += 1
        yield t + phase


def request_body(spec: RequestSpec, route: Route, ignore_eos: bool) -> bytes:
    body: dict[str, Any] = {
        "model": route.model,
        "messages": spec.messages,
        "max_tokens": spec.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos and spec.ignore_eos:
        body["ignore_eos"] = True
    if spec.tools:
        body["tools"] = spec.tools
    body.update(spec.extra)
    return orjson.dumps(body)


def _error_detail(raw: bytes) -> str:
    try:
        err = orjson.loads(raw).get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:200]
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return raw[:200].decode("utf-8", "replace")


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
        self.ws: Any = None  # the websocket pool, with --transport ws
        base = cfg.base_url()
        self.urls = {t: f"{base}{r.path}/chat/completions" for t, r in cfg.routes.items()}
        self.headers = {"content-type": "application/json", "accept-encoding": "identity",
                        **cfg.headers}

    def _clients(self) -> list[httpx.AsyncClient]:
        """Several pooled clients: httpcore scans its whole pool on every request, so one pool
        of hundreds of connections costs milliseconds per request; pools of ~8 do not."""
        reuse = self.cfg.transport == "http"
        limits = httpx.Limits(
            max_connections=None,
            max_keepalive_connections=None if reuse else 0,
            keepalive_expiry=30.0,
        )
        timeout = httpx.Timeout(self.cfg.timeout, connect=self.cfg.connect_timeout, pool=None)
        host = urlsplit(self.cfg.url).hostname or ""
        loopback = host in ("localhost", "127.0.0.1", "::1")
        users = self.cfg.concurrency
        n = OPEN_LOOP_POOLS if users is None else max(1, min(MAX_POOLS, -(-users // POOL_SIZE)))
        tls = httpx.create_ssl_context()  # one CA bundle load, shared
        return [httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=not loopback,
                                  verify=tls) for _ in range(n)]

    def _next(self) -> RequestSpec | None:
        if self.stop.is_set():
            return None
        if self.cfg.requests is not None and self.index >= self.cfg.requests:
            return None
        if self.cfg.duration is not None and perf_counter() - self.t0 >= self.cfg.duration:
            return None
        spec = next(self.specs, None)
        if spec is not None and spec.tier not in self.urls:
            raise LoadError(f"tier {spec.tier!r} has no route; known: {', '.join(self.urls)}")
        return spec

    async def _preflight(self) -> None:
        """One GET of ``/models`` before the clock starts: httpx's first request in a process
        spends tens of ms importing and setting up, which would delay the first arrivals."""
        route = next(iter(self.cfg.routes.values()))
        with contextlib.suppress(Exception):
            await self.clients[0].get(f"{self.cfg.base_url()}{route.path}/models",
                                  headers=self.headers, timeout=5.0)

    async def run(self) -> RunResult:
        interrupted = False
        send_end = 0.0
        async with contextlib.AsyncExitStack() as stack:
            self.clients = [await stack.enter_async_context(c) for c in self._clients()]
            if self.cfg.transport == "ws":
                from .wsload import WsPool

                auth = self.headers.get("authorization", "")
                key = auth[7:] if auth.lower().startswith("bearer ") else None
                self.ws = WsPool(self.cfg.base_url(), key, self.cfg.timeout)
                stack.push_async_callback(self.ws.aclose)
            await self._preflight()
            if self.ready is not None:
                self.ready()
            wall0, cpu0, unix0 = perf_counter(), time.process_time(), time.time()
            self.t0 = wall0
            loop = asyncio.get_running_loop()
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGINT, self.stop.set)
            try:
                if self.cfg.concurrency:
                    workers = [self._user(u) for u in range(self.cfg.concurrency)]
                    sender = asyncio.ensure_future(asyncio.gather(*workers))
                else:
                    sender = asyncio.ensure_future(self._open_loop())
                stopper = asyncio.ensure_future(self.stop.wait())
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
        timed = getattr(self.source, "timed", None)
        if timed is not None:  # a Sampler: arrivals and requests from one seeded stream
            return timed(cfg.rate, cfg.arrivals, cfg.phase)
        offsets = arrival_offsets(cfg.rate, cfg.arrivals, cfg.seed, cfg.phase)
        return zip(offsets, self.specs, strict=False)

    async def _open_loop(self) -> None:
        cfg = self.cfg
        for offset, spec in self._timed():
            if cfg.duration is not None and offset > cfg.duration:
                break
            if cfg.requests is not None and self.index >= cfg.requests:
                break
            if spec.tier not in self.urls:
                raise LoadError(f"tier {spec.tier!r} has no route; known: {', '.join(self.urls)}")
            delay = self.t0 + offset - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.stop.is_set():
                break
            idx = self._take()
            client = self.clients[idx % len(self.clients)]
            task = asyncio.ensure_future(self._one(spec, offset, idx, client))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _user(self, user: int) -> None:
        client = self.clients[user % len(self.clients)]
        while True:
            spec = self._next()
            if spec is None:
                return
            await self._one(spec, None, self._take(), client)

    def _take(self) -> int:
        idx = self.index
        self.index += 1
        return idx

    async def _one(
        self, spec: RequestSpec, scheduled: float | None, idx: int, client: httpx.AsyncClient
    ) -> None:
        live = self.live
        live.sent += 1
        live.inflight += 1
        body = request_body(spec, self.cfg.routes[spec.tier], self.cfg.ignore_eos)
        url = self.urls[spec.tier]
        t0 = perf_counter()
        res = RequestResult(idx, spec.tier, t0 - self.t0, scheduled, tools=spec.tools,
                            prompt_tokens=spec.prompt_tokens)
        parser = StreamParser(t0, self.cfg.strict_stream)
        try:
            if self.ws is not None:
                from .wsload import ws_exchange

                route = self.cfg.routes[spec.tier]
                await ws_exchange(self.ws, spec, route, res, t0, self.cfg.ignore_eos,
                                  self.cfg.timeout, live)
            else:
                await self._exchange(client, url, body, res, parser)
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
        if self.ws is None:
            _fill(res, parser)
        live.inflight -= 1
        live.done += 1
        if res.error:
            live.errors += 1
        self.results.append(res)

    async def _exchange(
        self, client: httpx.AsyncClient, url: str, body: bytes, res: RequestResult,
        parser: StreamParser,
    ) -> None:
        live = self.live
        async with asyncio.timeout(self.cfg.timeout):
            async with client.stream("POST", url, content=body, headers=self.headers) as resp:
                res.status = resp.status_code
                res.served_tier = resp.headers.get("x-fastmode-tier")
                if resp.status_code != 200:
                    res.error = f"http_{resp.status_code}"
                    res.detail = _error_detail(await resp.aread())
                    return
                feed = parser.feed
                plain = "content-encoding" not in resp.headers
                async for chunk in resp.aiter_raw() if plain else resp.aiter_bytes():
                    n = feed(chunk, perf_counter())
                    if n:
                        live.tokens += n
                parser.close(perf_counter())
        res.error, res.detail = parser.outcome()


def _fill(res: RequestResult, p: StreamParser) -> None:
    res.ttft = p.ttft
    res.chunk_times = p.times
    res.chunk_tokens = p.counts
    res.events = p.events
    res.finish_reason = p.finish_reason
    res.time_info = p.time_info
    res.tool_calls = [ToolCallRecord(n, a) for n, a in p.tool_calls()]
    u = p.usage
    if u:
        out = u.get("completion_tokens", u.get("output_tokens"))
        if isinstance(out, int):
            res.output_tokens = out
        prompt = u.get("prompt_tokens", u.get("input_tokens"))
        if isinstance(prompt, int):
            res.prompt_tokens = prompt
        cost = u.get("cost_usd")
        if isinstance(cost, int | float):
            res.cost_usd = float(cost)


class Progress:
    """A live rich progress bar: requests done, errors, in flight, current output tokens/s."""

    def __init__(self, cfg: LoadConfig, live: Live, label: str = "bench") -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.cfg, self.live = cfg, live
        self.samples: deque[tuple[float, int]] = deque(maxlen=64)
        self.bar = Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(), console=Console(stderr=True), auto_refresh=False,
        )
        self.by_time = cfg.requests is None and cfg.duration is not None
        total = cfg.duration if self.by_time else cfg.requests
        self.task = self.bar.add_task(label, total=total, status="")

    async def run(self) -> None:
        t0 = perf_counter()
        with self.bar:
            try:
                while True:
                    self.update(perf_counter() - t0)
                    await asyncio.sleep(0.25)
            finally:
                self.update(perf_counter() - t0)

    def update(self, elapsed: float) -> None:
        live = self.live
        now = perf_counter()
        self.samples.append((now, live.tokens))
        old = next((s for s in self.samples if now - s[0] <= 2.0), self.samples[0])
        tps = (live.tokens - old[1]) / (now - old[0]) if now > old[0] else 0.0
        status = (f"{live.done} done  {live.errors} errors  {live.inflight} in flight  "
                  f"{tps:,.0f} tok/s")
        done = min(elapsed, self.cfg.duration or 0) if self.by_time else live.done
        self.bar.update(self.task, completed=done, status=status)
        self.bar.refresh()


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


def run_sync(cfg: LoadConfig, specs: Iterable[RequestSpec], label: str = "bench") -> RunResult:
    """``run_load`` in a fresh event loop (uvloop when installed)."""
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(run_load(cfg, specs, label))
