"""``--transport ws``: requests as turns on Responses API websockets (``clients.client``).

A pool of open sockets per base path (``/v1``, ``/fast/v1``): a request takes an idle socket or
opens one (its connect time then counts in its TTFT, as a fresh HTTP connection's does), runs
one ``response.create`` turn, and gives the socket back; a socket that broke is dropped. In a
closed loop the pool settles at one socket per user and path, as agents keep theirs.

Token times are the client's parse times of each ``response.output_text.delta`` /
``function_call_arguments.delta`` frame (one frame per event). The served tier is not sent on
the socket, so requests are counted under the tier they asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from time import perf_counter
from types import TracebackType
from typing import Any

import httpx

from fastmode.clients.client import Client
from fastmode.clients.events import Done, Error, TextDelta, ToolCallDelta, Usage
from fastmode.clients.http_transport import preflight
from fastmode.clients.load_config import LoadConfig
from fastmode.clients.records import Live, RequestResult, ToolCallRecord
from fastmode.clients.workload import RequestSpec, Route


class WsPool:
    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.idle: dict[str, list[Client]] = defaultdict(list)
        self.all: set[Client] = set()
        self._closing: set[asyncio.Task[None]] = set()

    def acquire(self, path: str) -> Client:
        idle = self.idle[path]
        if idle:
            return idle.pop()
        client = Client(self.base_url + path, api_key=self.api_key, transport="ws",
                        timeout=self.timeout)
        self.all.add(client)
        return client

    def release(self, path: str, client: Client, healthy: bool) -> None:
        if healthy:
            self.idle[path].append(client)
        else:
            self.all.discard(client)
            task = asyncio.ensure_future(client.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        clients, self.all = list(self.all), set()
        self.idle.clear()
        for c in clients:
            with contextlib.suppress(Exception):
                await c.aclose()


def error_kind(err: Error) -> str:
    """The bench's error kind of an ``Error`` event (see ``clients.records``)."""
    if err.status is not None:
        return f"http_{err.status}"
    if err.code == "connection_error":
        return "connect"
    if err.code == "connection_closed":
        return "disconnect"
    return "stream_error"


async def ws_exchange(
    pool: WsPool, spec: RequestSpec, route: Route, res: RequestResult, t0: float,
    ignore_eos: bool, timeout: float, live: Live,
) -> None:
    """One request as a websocket turn; fills ``res`` (errors included, never raises but
    cancellation and timeouts, which the caller records)."""
    client = pool.acquire(route.path)
    healthy = False
    extra: dict[str, Any] = {}
    if ignore_eos and spec.ignore_eos:
        extra["ignore_eos"] = True
    tool_choice = spec.extra.get("tool_choice")
    calls: dict[int, tuple[str, list[str]]] = {}
    times, counts = res.chunk_times, res.chunk_tokens
    try:
        stream = client.stream(spec.messages, model=route.model, max_tokens=spec.max_tokens,
                               tools=spec.tools, tool_choice=tool_choice, extra=extra)
        async with asyncio.timeout(timeout):
            async for ev in stream:
                if isinstance(ev, TextDelta | ToolCallDelta):
                    if isinstance(ev, ToolCallDelta):
                        name, parts = calls.setdefault(ev.index, ("", []))
                        if ev.name:
                            calls[ev.index] = (ev.name, parts)
                        parts.append(ev.arguments)
                    elif not ev.text:
                        continue
                    t = ev.t - t0
                    if res.ttft is None:
                        res.ttft = t
                    if times and times[-1] == t:
                        counts[-1] += 1
                    else:
                        times.append(t)
                        counts.append(1)
                    res.events += 1
                    live.tokens += 1
                elif isinstance(ev, Usage):
                    res.output_tokens = ev.output_tokens
                    res.prompt_tokens = ev.input_tokens
                    res.cost_usd = ev.cost_usd
                elif isinstance(ev, Done):
                    res.finish_reason = ev.reason
                    res.time_info = ev.time_info
                elif isinstance(ev, Error):
                    res.error, res.detail = error_kind(ev), ev.message[:200]
                    res.status = ev.status
        if res.error is None and res.finish_reason is None:
            res.error, res.detail = "disconnect", "the turn ended before response.completed"
        healthy = res.error is None or res.error.startswith("http_4")
    finally:
        res.tool_calls = [ToolCallRecord(n, "".join(a)) for _, (n, a) in sorted(calls.items())]
        pool.release(route.path, client, healthy)
    if res.error is None:
        res.status = 200
    res.end = perf_counter() - t0


class WsTransport:
    """The websocket pool of one load, with the same interface as ``HttpTransport``."""

    def __init__(self, cfg: LoadConfig, live: Live) -> None:
        self.cfg = cfg
        self.live = live
        auth = cfg.headers.get("authorization", "")
        key = auth[7:] if auth.lower().startswith("bearer ") else None
        self.pool = WsPool(cfg.base_url(), key, cfg.timeout)

    async def __aenter__(self) -> WsTransport:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.pool.aclose()

    async def preflight(self) -> None:
        """As over HTTP: one GET of ``/models`` before the clock starts."""
        headers = {"accept-encoding": "identity", **self.cfg.headers}
        async with httpx.AsyncClient(trust_env=not self.cfg.is_loopback()) as client:
            await preflight(client, self.cfg, headers)

    def prepare(self, spec: RequestSpec) -> None:
        """Nothing to encode ahead: the client builds the ``response.create`` frame."""
        return None

    async def exchange(
        self, spec: RequestSpec, body: bytes | None, res: RequestResult, t0: float, slot: int
    ) -> None:
        await ws_exchange(self.pool, spec, self.cfg.routes[spec.tier], res, t0,
                          self.cfg.ignore_eos, self.cfg.timeout, self.live)
