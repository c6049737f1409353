"""``--transport http`` / ``http-fresh``: one request as a streamed ``POST /chat/completions``.

The generator spreads requests over several pooled httpx clients: httpcore scans its whole pool
on every request, so one pool of hundreds of connections costs milliseconds per request, while
pools of ~8 do not. ``http`` keeps connections alive; ``http-fresh`` opens one per request.
The hot path per network chunk is ``perf_counter()`` plus ``StreamParser.feed``.
"""

from __future__ import annotations

import asyncio
import contextlib
from time import perf_counter
from types import TracebackType
from typing import Any

import httpx
import orjson

from fastmode.clients.load_config import LoadConfig
from fastmode.clients.records import Live, RequestResult, ToolCallRecord
from fastmode.clients.sse_scanner import StreamParser
from fastmode.clients.workload import RequestSpec, Route

POOL_SIZE = 8  # closed loop: users per pooled client
MAX_POOLS = 128
OPEN_LOOP_POOLS = 16
PREFLIGHT_TIMEOUT_S = 5.0


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


def error_detail(raw: bytes) -> str:
    """One line from a non-200 body: its OpenAI error message, else its first bytes."""
    try:
        err = orjson.loads(raw).get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:200]
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return raw[:200].decode("utf-8", "replace")


def fill_from_parser(res: RequestResult, p: StreamParser) -> None:
    """Copy what the parser saw into the request's record (usage overrides the counts)."""
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


class HttpTransport:
    """The HTTP clients of one load and its requests' URLs and headers."""

    def __init__(self, cfg: LoadConfig, live: Live) -> None:
        self.cfg = cfg
        self.live = live
        base = cfg.base_url()
        self.urls = {t: f"{base}{r.path}/chat/completions" for t, r in cfg.routes.items()}
        self.headers = {"content-type": "application/json", "accept-encoding": "identity",
                        **cfg.headers}
        self.clients: list[httpx.AsyncClient] = []
        self._stack = contextlib.AsyncExitStack()

    def _make_clients(self) -> list[httpx.AsyncClient]:
        reuse = self.cfg.transport == "http"
        limits = httpx.Limits(
            max_connections=None,
            max_keepalive_connections=None if reuse else 0,
            keepalive_expiry=30.0,
        )
        timeout = httpx.Timeout(self.cfg.timeout, connect=self.cfg.connect_timeout, pool=None)
        users = self.cfg.concurrency
        n = OPEN_LOOP_POOLS if users is None else max(1, min(MAX_POOLS, -(-users // POOL_SIZE)))
        tls = httpx.create_ssl_context()  # one CA bundle load, shared
        return [httpx.AsyncClient(limits=limits, timeout=timeout,
                                  trust_env=not self.cfg.is_loopback(), verify=tls)
                for _ in range(n)]

    async def __aenter__(self) -> HttpTransport:
        self.clients = [await self._stack.enter_async_context(c) for c in self._make_clients()]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    async def preflight(self) -> None:
        """One GET of ``/models`` before the clock starts: httpx's first request in a process
        spends tens of ms importing and setting up, which would delay the first arrivals."""
        await preflight(self.clients[0], self.cfg, self.headers)

    def prepare(self, spec: RequestSpec) -> bytes:
        """The request body, encoded before the request's clock starts."""
        return request_body(spec, self.cfg.routes[spec.tier], self.cfg.ignore_eos)

    async def exchange(
        self, spec: RequestSpec, body: bytes | None, res: RequestResult, t0: float, slot: int
    ) -> None:
        """Send one request on client ``slot`` and record its stream into ``res``; transport
        exceptions propagate (the generator classifies them)."""
        assert body is not None
        client = self.clients[slot % len(self.clients)]
        parser = StreamParser(t0, self.cfg.strict_stream)
        live = self.live
        try:
            async with asyncio.timeout(self.cfg.timeout):
                async with client.stream("POST", self.urls[spec.tier], content=body,
                                         headers=self.headers) as resp:
                    res.status = resp.status_code
                    res.served_tier = resp.headers.get("x-fastmode-tier")
                    if resp.status_code != 200:
                        res.error = f"http_{resp.status_code}"
                        res.detail = error_detail(await resp.aread())
                        return
                    feed = parser.feed
                    plain = "content-encoding" not in resp.headers
                    async for chunk in resp.aiter_raw() if plain else resp.aiter_bytes():
                        n = feed(chunk, perf_counter())
                        if n:
                            live.tokens += n
                    parser.close(perf_counter())
            res.error, res.detail = parser.outcome()
        finally:
            fill_from_parser(res, parser)


async def preflight(client: httpx.AsyncClient, cfg: LoadConfig, headers: dict[str, str]) -> None:
    """GET ``{first route}/models``, ignoring the answer and any error."""
    route = next(iter(cfg.routes.values()))
    with contextlib.suppress(Exception):
        await client.get(f"{cfg.base_url()}{route.path}/models", headers=headers,
                         timeout=PREFLIGHT_TIMEOUT_S)
