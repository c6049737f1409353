"""Remote tiers: the gateway in front of engine services (or any OpenAI-compatible server).

A tier listed under ``[remote.tiers.NAME]`` is served by a pool of upstream base URLs instead of
the in-process deployment. Per request the gateway still authenticates, resolves the tier, checks
the context window and the rate limits, and bills at its own prices; the upstream only generates.

- Balancing: least outstanding requests among the healthy upstreams (ties rotate).
- Health: every ``health_interval_s`` a GET on ``health_path`` (``/healthz`` for fastmode engines,
  ``/health`` or ``/v1/models`` for vLLM and others); a failed check, or a refused / reset
  connection during a request, takes the upstream out of rotation; a good check brings it back.
- Retries: a request moves to another upstream (up to ``max_attempts``) only while nothing has
  reached the client: connection failures, a 429/502/503/504 answer, or an upstream that dies
  before its first byte. Once a stream has started, a failure ends it with an OpenAI error event
  (``data: {"error": ...}``), which the SDKs raise.
- Streaming: the upstream's SSE bytes go to the client as they arrive, cut only at event
  boundaries (a half event is useless to a client), never re-encoded; ``stream_options.
  include_usage`` is forced upstream so the usage chunk can be read (and removed again when the
  client did not ask for it). Usage and cost are counted once in the gateway's metrics, at the
  gateway's prices.
- Only Chat Completions is proxied; the Responses and Messages APIs answer 400 on a remote
  tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
import orjson
from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..admission import Gateway
from ..config import Config, RemoteConfig
from ..errors import APIError, retry_headers
from ..ids import new_id
from ..protocols.openai_chat import ChatRequest
from ..request import TurnRequest
from ..routing import service_tier_label
from ..turn import _disconnected
from .http import Disconnected, Pool, ReadTimeout, UpstreamError
from .http import Response as UpstreamResponse
from .pool import Upstream, UpstreamPool, _PoolCollector
from .rewrite import Call, Tap, _error_event, settle_call, upstream_error

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
RETRY_STATUSES = {429, 502, 503, 504}


class _Failed(Exception):
    """Every upstream tried failed before anything reached the client."""

    def __init__(self, error: APIError, overloaded: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.overloaded = overloaded


class ProxyStream(StreamingResponse):
    """A StreamingResponse that settles and closes its upstream however the response ends
    (finished, client gone, cancelled), even if its body iterator never ran."""

    def __init__(self, content, cleanup, **kw) -> None:
        super().__init__(content, **kw)
        self._cleanup = cleanup

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with contextlib.suppress(Exception):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
            await self._cleanup(499)


class RemoteTiers:
    """The upstream pools of one gateway app, their health checks and the proxy."""

    def __init__(self, config: Config, gateway: Gateway) -> None:
        self.config = config
        self.settings: RemoteConfig = config.remote
        self.gateway = gateway
        self.pools = {name: UpstreamPool(name, cfg) for name, cfg in self.settings.tiers.items()}
        self.http: dict[str, Pool] = {}  # one keep-alive pool per upstream URL
        self._health_client: httpx.AsyncClient | None = None
        self._health_task: asyncio.Task | None = None
        if self.pools:
            r = gateway.metrics.registry
            self.attempts = Counter(
                "fastmode_upstream_attempts",
                "Upstream attempts by tier, upstream and outcome "
                "(ok, error: passed on, retried, failed: stream cut)",
                ["tier", "upstream", "outcome"], registry=r,
            )
            r.register(_PoolCollector(self.pools))

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if not self.pools:
            return
        s = self.settings
        self.http = {u.url: Pool(u.url, s.max_idle_connections)
                     for pool in self.pools.values() for u in pool.upstreams}
        self._health_client = httpx.AsyncClient(
            timeout=httpx.Timeout(s.health_timeout_s),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )
        await self.check_all()
        self._health_task = asyncio.get_running_loop().create_task(
            self._health_loop(), name="upstream-health")

    async def stop(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
            self._health_task = None
        if self._health_client is not None:
            await self._health_client.aclose()
            self._health_client = None
        for p in self.http.values():
            p.close()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.health_interval_s)
            await self.check_all()

    async def check_all(self) -> None:
        checks = [self._check(pool, up) for pool in self.pools.values() for up in pool.upstreams]
        await asyncio.gather(*checks)

    async def _check(self, pool: UpstreamPool, up: Upstream) -> None:
        assert self._health_client is not None
        try:
            r = await self._health_client.get(up.url + pool.cfg.health_path, headers=pool.auth)
            ok, why = r.status_code == 200, f"health check: HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            ok, why = False, f"health check: {type(exc).__name__}"
        up.checked_at = time.monotonic()
        if ok:
            pool.mark_up(up)
        else:
            pool.mark_down(up, why)

    # -- routing --------------------------------------------------------------------------

    def serves(self, model: str, fast: bool) -> bool:
        """Whether this request's tier is remote (raises 404 for an unknown model)."""
        return bool(self.pools) and self.gateway.resolve(model, fast).name in self.pools

    def unsupported(self, protocol: str) -> APIError:
        """400 for an API the remote path does not proxy (only Chat Completions is)."""
        api = {"responses": "The Responses API", "messages": "The Anthropic Messages API"}
        return APIError(
            400,
            f"{api.get(protocol, protocol)} is not supported on remote tiers (served by upstream "
            "engines); use /v1/chat/completions.",
            param="model",
            code="unsupported_on_remote_tier",
        )

    # -- the proxy ------------------------------------------------------------------------

    async def chat(
        self,
        request: Request,
        body: dict[str, Any],
        req: ChatRequest,
        turn: TurnRequest,
        started: float,
    ) -> Response:
        gw = self.gateway
        principal = gw.auth.authenticate(turn.authorization)
        tier = gw.resolve(req.model, turn.fast)
        prompt_tokens = turn.prompt_tokens
        cap = gw.router.max_output(tier, prompt_tokens, turn.max_tokens)
        limit_headers = gw.auth.check(principal, tier.name, prompt_tokens + cap)
        include_usage = bool(req.stream and req.stream_options and req.stream_options.include_usage)
        call = Call(new_id("req"), tier, tier.name, prompt_tokens, started, include_usage,
                    headers=limit_headers)
        if req.stream:
            return await self._stream(call, body, req)
        task = asyncio.ensure_future(self._complete(call, body, req))
        watch = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                self._settle(call, 499)
        if task.cancelled():
            return Response(status_code=499)
        return task.result()

    def _payload(self, tier: str, body: dict[str, Any], stream: bool) -> bytes:
        cfg = self.pools[tier].cfg
        up = dict(body)
        up.pop("service_tier", None)  # the gateway chose the tier; the upstream just serves
        if cfg.model:
            up["model"] = cfg.model
        if stream:
            up["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return orjson.dumps(up)

    async def _open(self, call: Call, body: dict[str, Any], req: ChatRequest) -> bytes:
        """Start the request on an upstream of the call's tier, moving to another upstream
        while nothing has been read; with a downgrade to standard when the fast pool is full
        and ``server.fast_overflow = "downgrade"``. Returns the first bytes (whole body when
        not streaming); ``call.upstream`` and ``call.response`` are set."""
        try:
            return await self._attempts(call, self._payload(call.tier.name, body, req.stream),
                                        req.stream)
        except _Failed as failed:
            gw = self.gateway
            standard = gw.resolve(req.model, False)
            if not failed.overloaded or standard.name == call.tier.name:
                self._settle(call, failed.error.status)
                raise failed.error from None
            if gw.config.server.fast_overflow != "downgrade" or standard.name not in self.pools:
                self._settle(call, 429)
                raise APIError(
                    429,
                    f"The {call.tier.name} tier is at capacity. Retry shortly or use the "
                    "standard tier.",
                    code="rate_limit_exceeded",
                    type="requests",
                    headers=retry_headers(gw.config.server.retry_after_s),
                ) from None
            gw.metrics.downgrades.labels(standard.name).inc()
            call.tier = standard
            try:
                return await self._attempts(
                    call, self._payload(standard.name, body, req.stream), req.stream)
            except _Failed as again:
                self._settle(call, again.error.status)
                raise again.error from None

    async def _attempts(self, call: Call, payload: bytes, stream: bool) -> bytes:
        assert self.http, "RemoteTiers.start() was not awaited"
        pool = self.pools[call.tier.name]
        s = self.settings
        tried: set[Upstream] = set()
        last: APIError | None = None
        overloaded = True
        read_timeout = s.stream_idle_timeout_s if stream else s.request_timeout_s
        headers = {"content-type": "application/json", "x-request-id": call.id, **pool.auth}
        if stream:
            headers["accept"] = "text/event-stream"
        for _ in range(s.max_attempts):
            up = pool.pick(tried)
            if up is None:
                break
            tried.add(up)
            call.attempts += 1
            up.outstanding += 1
            resp: UpstreamResponse | None = None
            outcome = "cancelled"
            try:
                resp = await self.http[up.url].request(
                    "POST", "/v1/chat/completions", payload, headers,
                    connect_timeout=s.connect_timeout_s, read_timeout=read_timeout)
                if resp.status_code != 200:
                    err = upstream_error(resp.status_code, await resp.read(), resp.headers)
                    if resp.status_code not in RETRY_STATUSES:
                        outcome = "error"
                        self._settle(call, err.status)
                        raise err
                    overloaded &= resp.status_code in (429, 503)
                    last = err
                    outcome = "retried"
                    continue
                if stream:
                    it = resp.chunks()
                    first = b""
                    while not first:  # an upstream that closes at once counts as failed
                        first = await it.__anext__()
                    call.chunks = it
                else:
                    first = await resp.read()
                outcome = "ok"
                call.upstream, call.response = up, resp
                call.first_byte = time.perf_counter()
                return first
            except (UpstreamError, StopAsyncIteration) as exc:
                kind = type(exc).__name__
                outcome = "retried"
                if isinstance(exc, ReadTimeout):
                    last = APIError(504, "The upstream server timed out.", type="server_error",
                                    code="upstream_timeout")
                    if not stream:  # it had the whole request_timeout_s: do not start again
                        outcome = "error"
                        self._settle(call, 504)
                        raise last from None
                else:
                    pool.mark_down(up, kind)
                    last = APIError(
                        503, "No upstream server could take the request: "
                        f"{kind} from the last one tried.",
                        code="upstream_unavailable",
                        headers=retry_headers(self.config.server.retry_after_s),
                    )
                overloaded = False
            finally:
                self.attempts.labels(call.tier.name, up.url, outcome).inc()
                if outcome != "ok":
                    up.outstanding -= 1
                    if resp is not None:
                        await resp.aclose()
        if last is None:
            last = APIError(503, f"No upstream server is configured for the {call.tier.name} "
                            "tier.", code="upstream_unavailable",
                            headers=retry_headers(self.config.server.retry_after_s))
            overloaded = False
        raise _Failed(last, overloaded)

    def _headers(self, call: Call) -> dict[str, str]:
        h = {
            "x-request-id": call.id,
            "x-fastmode-tier": call.tier.name,
            "openai-processing-ms": str(int((time.perf_counter() - call.started) * 1000)),
            **call.headers,
        }
        if call.upstream is not None:
            h["x-fastmode-upstream"] = call.upstream.url
            h["x-fastmode-upstream-attempts"] = str(call.attempts)
        if call.response is not None and (rid := call.response.headers.get("x-request-id")):
            h["x-fastmode-upstream-request-id"] = rid
        if call.requested_tier != call.tier.name:
            h["x-fastmode-requested-tier"] = call.requested_tier
        return h

    async def _complete(self, call: Call, body: dict[str, Any], req: ChatRequest) -> Response:
        try:
            raw = await self._open(call, body, req)
        finally:
            if call.upstream is not None:
                call.upstream.outstanding -= 1
                assert call.response is not None
                await call.response.aclose()
        try:
            data = orjson.loads(raw)
            usage = data["usage"]
            assert isinstance(usage, dict)
        except (orjson.JSONDecodeError, KeyError, TypeError, AssertionError):
            self._settle(call, 502)
            raise APIError(502, "Upstream error: the upstream's answer is not a chat completion "
                           "with usage.", type="server_error", code="bad_upstream_response"
                           ) from None
        call.usage = usage
        if isinstance(data.get("time_info"), dict):
            call.time_info = data["time_info"]
        self._settle(call, 200)
        data["usage"] = {**usage, "cost_usd": call.cost_usd}
        data["service_tier"] = service_tier_label(call.tier.name)
        headers = self._headers(call)
        headers["x-fastmode-cost-usd"] = f"{call.cost_usd:.8f}"
        return Response(orjson.dumps(data), 200, headers=headers, media_type="application/json")

    async def _stream(self, call: Call, body: dict[str, Any], req: ChatRequest) -> Response:
        first = await self._open(call, body, req)
        up, resp = call.upstream, call.response
        assert up is not None and resp is not None
        tap = Tap(call, service_tier_label(call.tier.name))
        closed = False

        async def cleanup(status: int) -> None:
            nonlocal closed
            self._settle(call, status)
            if not closed:
                closed = True
                up.outstanding -= 1
                await resp.aclose()

        async def relay():
            status = 499
            try:
                out = tap.feed(first)
                if tap.done:
                    status = 200
                    self._settle(call, 200)
                if out:
                    yield out
                async for chunk in call.chunks:
                    out = tap.feed(chunk)
                    if tap.done:
                        status = 200
                        self._settle(call, 200)
                    if out:
                        yield out
                if not tap.done:
                    raise Disconnected("the upstream ended the stream before [DONE]")
            except UpstreamError as exc:
                status = 502
                timeout = isinstance(exc, ReadTimeout)
                self.attempts.labels(call.tier.name, up.url, "failed").inc()
                if not timeout:
                    self.pools[call.tier.name].mark_down(up, type(exc).__name__)
                self._settle(call, 502)
                yield _error_event(
                    "The upstream server " + ("went silent" if timeout else "failed") +
                    " in the middle of the response; the stream is incomplete.",
                    "upstream_timeout" if timeout else "upstream_disconnected")
            finally:
                await cleanup(status)

        return ProxyStream(relay(), cleanup, media_type="text/event-stream",
                           headers={**SSE_HEADERS, **self._headers(call)})

    # -- settlement -----------------------------------------------------------------------

    def _settle(self, call: Call, status: int) -> None:
        settle_call(call, self.gateway.metrics, status)
