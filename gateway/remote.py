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
- Only Chat Completions is proxied; the Responses API answers 400 on a remote tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from backends.engine import Tier

from .config import Config, RemoteConfig, RemoteTierConfig
from .errors import ERROR_TYPES, APIError, retry_headers
from .schemas import ChatRequest
from .service import Gateway, new_id, service_tier_label
from .upstream_http import Disconnected, Pool, ReadTimeout, UpstreamError
from .upstream_http import Response as UpstreamResponse

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
RETRY_STATUSES = {429, 502, 503, 504}
DONE = b"data: [DONE]"
_PASS_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry")


@dataclass(eq=False)
class Upstream:
    url: str
    tier: str
    healthy: bool = True
    outstanding: int = 0
    last_error: str = ""
    checked_at: float = 0.0


class UpstreamPool:
    """The upstreams of one tier: selection and health state."""

    def __init__(self, tier: str, cfg: RemoteTierConfig) -> None:
        self.tier = tier
        self.cfg = cfg
        self.upstreams = [Upstream(url, tier) for url in cfg.upstreams]
        self._turn = 0
        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
        self.auth = {"authorization": f"Bearer {key}"} if key else {}

    def pick(self, exclude: set[Upstream]) -> Upstream | None:
        """Least outstanding among the healthy upstreams not yet tried; when none of the pool
        is healthy, the untried unhealthy ones (a stale check must not stop all traffic)."""
        left = [u for u in self.upstreams if u not in exclude]
        if not left:
            return None
        if any(u.healthy for u in self.upstreams):
            left = [u for u in left if u.healthy]
            if not left:
                return None
        n = len(left)
        start = self._turn % n
        self._turn += 1
        best = min(range(n), key=lambda i: (left[(start + i) % n].outstanding, i))
        return left[(start + best) % n]

    def mark_down(self, up: Upstream, why: str) -> None:
        up.healthy = False
        up.last_error = why

    def mark_up(self, up: Upstream) -> None:
        up.healthy = True
        up.last_error = ""


@dataclass(eq=False)
class Call:
    """One proxied request, from admission to settlement."""

    id: str
    tier: Tier
    requested_tier: str
    prompt_tokens: int
    started: float
    include_usage: bool
    upstream: Upstream | None = None
    response: UpstreamResponse | None = None
    chunks: Any = None  # the response's raw byte iterator, once the first bytes are read
    attempts: int = 0
    usage: dict[str, Any] | None = None
    time_info: dict[str, Any] | None = None
    events: int = 0  # SSE data events forwarded (for billing a stream cut short)
    first_byte: float | None = None
    settled: bool = False
    cost_usd: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    def cost(self, usage: dict[str, Any]) -> float:
        prompt, cached, output = _usage_counts(usage)
        return self.tier.prices.cost(prompt, cached, output)


def _usage_counts(usage: dict[str, Any]) -> tuple[int, int, int]:
    details = usage.get("prompt_tokens_details") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return prompt, min(cached, prompt), int(usage.get("completion_tokens") or 0)


def upstream_error(status: int, body: bytes, headers: Mapping[str, str] | None = None
                   ) -> APIError:
    """An upstream's error answer in the OpenAI format (OpenAI's, vLLM's and FastAPI's shapes)."""
    message = etype = code = param = None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, str):
            message = err
        else:
            src = err if isinstance(err, dict) else obj  # vLLM: {"object":"error","message",...}
            message, etype = src.get("message"), src.get("type")
            code, param = src.get("code"), src.get("param")
        if message is None and "detail" in obj:
            message = str(obj["detail"])
    if not message:
        text = body.decode("utf-8", "replace").strip()[:500]
        message = f"The upstream server answered HTTP {status}" + (f": {text}" if text else ".")
    if code is not None and not isinstance(code, str):
        code = None if isinstance(code, int) else str(code)  # vLLM repeats the status as code
    if status >= 500 and not str(message).startswith("Upstream"):
        message = f"Upstream error: {message}"
    if etype not in set(ERROR_TYPES.values()) | {"tokens", "requests", "server_error"}:
        etype = None
    passed = {k: v for k in _PASS_HEADERS if headers is not None and (v := headers.get(k))}
    return APIError(status, str(message), param=param if isinstance(param, str) else None,
                    code=code, type=etype or ERROR_TYPES.get(status, "server_error"),
                    headers=passed)


def _error_event(message: str, code: str) -> bytes:
    return b"data: " + orjson.dumps(
        {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    ) + b"\n\n"


class _Failed(Exception):
    """Every upstream tried failed before anything reached the client."""

    def __init__(self, error: APIError, overloaded: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.overloaded = overloaded


class Tap:
    """Follows an upstream SSE byte stream and returns the bytes to forward, cut at event
    boundaries. Reads the usage chunk (strips it when the client did not ask for usage, or puts
    the gateway's cost in it), the ``time_info`` of the last chunk, and ``[DONE]``. Per chunk it
    costs a few byte searches; only the closing events are parsed."""

    __slots__ = ("call", "buf", "strip", "done", "replace", "first")

    def __init__(self, call: Call, label: str) -> None:
        self.call = call
        self.buf = b""
        self.strip = not call.include_usage
        self.done = False
        self.first = label  # the service_tier label to show; learned against the first event
        self.replace: tuple[bytes, bytes] | None = None

    def feed(self, chunk: bytes) -> bytes:
        if self.buf:
            chunk = self.buf + chunk
        cut = chunk.rfind(b"\n\n")
        if cut < 0:
            self.buf = chunk
            return b""
        cut += 2
        out, self.buf = chunk[:cut], chunk[cut:]
        if self.first:
            self._learn(out)
        if self.strip:
            out = out.replace(b',"usage":null', b"")
        if self.replace is not None:
            out = out.replace(*self.replace)
        if (b'"usage":{' in out or b'"usage": {' in out or b'"time_info"' in out
                or DONE in out):
            out = self._inspect(out)
        self.call.events += out.count(b"data: {")
        return out

    def _learn(self, out: bytes) -> None:
        """Show the gateway's service_tier label if the upstream uses another one."""
        label, self.first = self.first, ""
        event = out.split(b"\n\n", 1)[0]
        if not event.startswith(b"data: {"):
            return
        try:
            theirs = orjson.loads(event[6:]).get("service_tier")
        except orjson.JSONDecodeError:
            return
        if isinstance(theirs, str) and theirs != label:
            self.replace = (b'"service_tier":' + orjson.dumps(theirs),
                            b'"service_tier":' + orjson.dumps(label))

    def _inspect(self, out: bytes) -> bytes:
        kept = []
        for event in out.split(b"\n\n")[:-1]:
            body = event[6:] if event.startswith(b"data: ") else event[5:].lstrip()
            if event.startswith(DONE):
                self.done = True
            elif (b'"usage"' in event or b'"time_info"' in event) and body.startswith(b"{"):
                try:
                    obj = orjson.loads(body)
                except orjson.JSONDecodeError:
                    obj = None
                if isinstance(obj, dict):
                    if isinstance(obj.get("time_info"), dict):
                        self.call.time_info = obj["time_info"]
                    usage = obj.get("usage")
                    if isinstance(usage, dict) and not obj.get("choices"):
                        self.call.usage = usage
                        if self.strip:
                            continue
                        obj["usage"] = {**usage, "cost_usd": self.call.cost(usage)}
                        event = b"data: " + orjson.dumps(obj)
            kept.append(event)
            kept.append(b"\n\n")
        return b"".join(kept)


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

    def refuse(self, model: str, fast: bool, api: str = "The Responses API") -> None:
        """400 for an API the remote path does not proxy (only Chat Completions is)."""
        if self.serves(model, fast):
            raise APIError(
                400,
                f"{api} is not supported on remote tiers (served by upstream engines); use "
                "/v1/chat/completions.",
                param="model",
                code="unsupported_on_remote_tier",
            )

    # -- the proxy ------------------------------------------------------------------------

    async def chat(
        self,
        request: Request,
        body: dict[str, Any],
        req: ChatRequest,
        prompt_tokens: int,
        max_tokens: int | None,
        fast: bool,
        started: float,
    ) -> Response:
        gw = self.gateway
        principal = gw.auth.authenticate(request.headers.get("authorization"))
        tier = gw.resolve(req.model, fast)
        cap = gw.max_output(tier, prompt_tokens, max_tokens)
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
        """Count the call once in the gateway's metrics, at the gateway's prices."""
        if call.settled:
            return
        call.settled = True
        metrics = self.gateway.metrics
        tier = call.tier.name
        if call.usage is not None:
            prompt, cached, output = _usage_counts(call.usage)
        elif call.events:  # cut short: the prompt, and the tokens that reached the client
            prompt, cached, output = call.prompt_tokens, 0, max(0, call.events - 1)
        else:
            metrics.record(tier, status)
            return
        call.cost_usd = call.tier.prices.cost(prompt, cached, output)
        ttft = itl = None
        ti = call.time_info
        if ti is not None:
            ttft = float(ti.get("queue_time", 0.0)) + float(ti.get("prompt_time", 0.0))
            if output > 1:
                itl = float(ti.get("completion_time", 0.0)) / (output - 1)
        elif call.first_byte is not None:
            ttft = call.first_byte - call.started
        if status != 200:
            metrics.cancelled.labels(tier).inc()
        metrics.record(tier, status, prompt=prompt, cached=cached, output=output,
                       cost=call.cost_usd, ttft=ttft, itl=itl)


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class _PoolCollector:
    """``fastmode_upstream_up`` and ``fastmode_upstream_outstanding``, read at scrape time."""

    def __init__(self, pools: dict[str, UpstreamPool]) -> None:
        self._pools = pools

    def describe(self):
        return []

    def collect(self):
        labels = ["tier", "upstream"]
        up = GaugeMetricFamily("fastmode_upstream_up",
                               "1 while the upstream is in rotation", labels=labels)
        out = GaugeMetricFamily("fastmode_upstream_outstanding",
                                "Requests in flight on the upstream", labels=labels)
        for pool in self._pools.values():
            for u in pool.upstreams:
                up.add_metric([pool.tier, u.url], 1.0 if u.healthy else 0.0)
                out.add_metric([pool.tier, u.url], u.outstanding)
        yield up
        yield out
