"""Remote tiers: the gateway in front of engine services (or any OpenAI-compatible server).

A tier listed under ``[remote.tiers.NAME]`` is served by a pool of upstream base URLs instead of
the in-process deployment, for every protocol: Chat Completions, the Responses API over SSE and
the websocket (``previous_response_id`` included) and Anthropic Messages. The gateway translates
each turn to the upstream's Chat Completions (``translate``) and renders the answer with the
protocol's own encoder: ``admit`` returns a ``Job`` whose token stream is the upstream's
(``stream``), and the turn pipeline does the rest exactly as for an in-process tier. Per request
the gateway still authenticates, resolves the tier, checks the context window and the rate
limits, keeps the conversation, and bills at its own prices; the upstream only generates.

- Balancing: least outstanding requests among the healthy upstreams (ties rotate).
- Health: every ``health_interval_s`` a GET on ``health_path`` (``/healthz`` for fastmode engines,
  ``/health`` or ``/v1/models`` for vLLM and others); a failed check, or a refused / reset
  connection during a request, takes the upstream out of rotation; a good check brings it back.
  ``readiness()`` says whether every remote tier has an upstream in rotation.
- Retries: a request moves to another upstream (up to ``max_attempts``) only while nothing has
  reached the client: connection failures, a 429/502/503/504 answer, or an upstream that dies
  before its first byte. A non-streamed client request is sent upstream non-streamed, so it is
  retried until it has its whole answer. Once a stream has started, a failure ends it with the
  protocol's error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from prometheus_client import Counter

from fastmode.gateway.config import Config, RemoteConfig
from fastmode.gateway.engines.tickets import ClientGone, Refused, Ticket
from fastmode.gateway.errors import APIError, retry_headers
from fastmode.gateway.http.netem import network_time
from fastmode.gateway.observe.metrics import Metrics
from fastmode.gateway.remote.http import Pool, ReadTimeout, UpstreamError
from fastmode.gateway.remote.http import Response as UpstreamResponse
from fastmode.gateway.remote.pool import Upstream, UpstreamPool, _PoolCollector
from fastmode.gateway.remote.rewrite import upstream_error
from fastmode.gateway.remote.stream import RemoteJob, UpstreamStream
from fastmode.gateway.remote.translate import (
    LiveReply,
    namespaces,
    reply_from_completion,
    upstream_payload,
)
from fastmode.gateway.values.ids import new_id
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest

RETRY_STATUSES = {429, 502, 503, 504}


class _Failed(Exception):
    """Every upstream tried failed before anything reached the client."""

    def __init__(self, error: APIError, overloaded: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.overloaded = overloaded


class _Opened:
    """An upstream that answered 200: which, its response, its first bytes (the whole body when
    not streamed) and, for a stream, the iterator of the rest."""

    def __init__(self, up: Upstream, resp: UpstreamResponse, first: bytes, attempts: int,
                 chunks: AsyncIterator[bytes] | None = None) -> None:
        self.up, self.resp, self.first, self.attempts = up, resp, first, attempts
        self.chunks = chunks


class RemoteTiers:
    """The upstream pools of one gateway app, their health checks and the admission of turns
    on remote tiers."""

    def __init__(self, config: Config, metrics: Metrics,
                 settle: Callable[[Job, int], None]) -> None:
        self.config = config
        self.settings: RemoteConfig = config.remote
        self.metrics = metrics
        self.settle = settle  # the gateway's settlement (once per job)
        self.pools = {name: UpstreamPool(name, cfg) for name, cfg in self.settings.tiers.items()}
        self.http: dict[str, Pool] = {}  # one keep-alive pool per upstream URL
        self.jobs: set[RemoteJob] = set()  # with an upstream request open (drained on stop)
        self._health_client: httpx.AsyncClient | None = None
        self._health_task: asyncio.Task[None] | None = None
        if self.pools:
            r = metrics.registry
            self.attempts = Counter(
                "fastmode_upstream_attempts",
                "Upstream attempts by tier, upstream and outcome (ok, error: passed on, "
                "retried, failed: stream cut, cancelled)",
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

    async def stop(self, drain_s: float = 30.0) -> None:
        """Let running remote turns finish (bounded), then cancel the rest and close."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_s
        while self.jobs and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for job in list(self.jobs):
            job.cancel()
            self.settle(job, 499)
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

    def readiness(self) -> dict[str, Any]:
        """``{"ready": bool, "tiers": {tier: {"in_rotation": n, "upstreams": m}}}``: ready when
        every remote tier has at least one upstream in rotation (what a readiness probe and a
        load balancer in front of several gateways should read)."""
        tiers = {name: {"in_rotation": sum(u.healthy for u in p.upstreams),
                        "upstreams": len(p.upstreams)} for name, p in self.pools.items()}
        return {"ready": all(t["in_rotation"] > 0 for t in tiers.values()), "tiers": tiers}

    # -- admission (``gateway.engines.tickets.Admission``) ---------------------------------------------

    async def admit(self, ticket: Ticket) -> RemoteJob:
        """The ticket's request on an upstream of its tier, retried across upstreams until
        one answers. The checks every tier gets (context window, limits) and the overflow
        policy are the shared front's (``Gateway.admit``); a pool that is only busy (429 /
        503 from every upstream tried) is ``Refused`` so the role's policy applies, anything
        else (all upstreams down: 503, an upstream's 4xx) is final.

        A non-streamed request with ``ticket.disconnected`` gives up when the client goes
        away (``ClientGone``; nothing is billed: nothing was sent)."""
        work = self._admit(ticket)
        if ticket.stream or ticket.disconnected is None:
            return await work
        job = await _unless(work, ticket.disconnected())
        if job is None:
            self.metrics.record(ticket.tier.name, 499)
            raise ClientGone()
        return job

    def _warm_up(self, ticket: Ticket, rid: str, arrival: float) -> RemoteJob:
        """A warm-up (``generate: false``) completes at the gateway with no output: Chat
        Completions, the upstream's protocol, has no way to prefill without generating."""
        req, decision = ticket.request, ticket.decision
        reply = LiveReply()
        upstream = UpstreamStream(reply, None, lambda outcome, exc: self.jobs.discard(job),
                                  arrival)
        job = RemoteJob(
            id=rid, model=req.model, tier=ticket.tier, role=ticket.role,
            requested_tier=decision.tier.name, gen=reply, prompt_tokens=req.prompt_tokens,
            cached_tokens=0, stream=upstream, created=int(time.time()),
            principal=decision.principal, network_s=network_time.get(),
            headers=dict(ticket.headers), upstream=upstream, prices=ticket.prices)
        self.jobs.add(job)
        upstream.complete(asyncio.get_running_loop().time())
        reply.reported_output = 0  # the stream's one empty piece is no output
        return job

    async def _admit(self, ticket: Ticket) -> RemoteJob:
        req, tier, streaming = ticket.request, ticket.tier, ticket.stream
        rid = new_id("req")
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        if ticket.pool_full:  # the fast-exhausted fault: as if every upstream said 429
            raise Refused(self.config.server.retry_after_s)
        if not req.generate:
            return self._warm_up(ticket, rid, arrival)
        try:
            opened = await self._attempts(rid, tier.name, req, ticket.cap, streaming)
        except _Failed as failed:
            if failed.overloaded:
                raise Refused(self.config.server.retry_after_s, error=failed.error) from None
            self.metrics.record(tier.name, failed.error.status)
            raise failed.error from None
        up = opened.up
        spaces = namespaces(req.generation.tools)
        reply, usage, time_info = LiveReply(spaces), None, None
        if not streaming:
            try:
                reply, usage, time_info = reply_from_completion(opened.first, spaces)
            except APIError as exc:
                up.outstanding -= 1
                self.attempts.labels(tier.name, up.url, "error").inc()
                opened.resp.close()
                self.metrics.record(tier.name, exc.status)
                raise

        def on_end(outcome: str, exc: UpstreamError | None) -> None:
            up.outstanding -= 1
            self.attempts.labels(tier.name, up.url, outcome).inc()
            if exc is not None and not isinstance(exc, ReadTimeout):
                self.pools[tier.name].mark_down(up, type(exc).__name__)
            self.jobs.discard(job)

        upstream = UpstreamStream(reply, opened.resp, on_end, arrival)
        headers = {**ticket.headers, "x-fastmode-upstream": up.url,
                   "x-fastmode-upstream-attempts": str(opened.attempts)}
        if upstream_rid := opened.resp.headers.get("x-request-id"):
            headers["x-fastmode-upstream-request-id"] = upstream_rid
        decision = ticket.decision
        job = RemoteJob(
            id=rid, model=req.model, tier=tier, role=ticket.role,
            requested_tier=decision.tier.name, gen=reply, prompt_tokens=req.prompt_tokens,
            cached_tokens=0, stream=upstream, created=int(time.time()),
            principal=decision.principal, network_s=network_time.get(), headers=headers,
            upstream=upstream, prices=ticket.prices, own_count=req.own_count,
        )
        self.jobs.add(job)
        if not streaming:
            job.take_usage(usage, time_info)
            upstream.complete(loop.time())
            return job
        assert opened.chunks is not None
        try:
            upstream.opened(opened.first, opened.chunks)
        except APIError:
            self.settle(job, 502)
            raise
        return job

    async def _attempts(self, rid: str, tier: str, req: TurnRequest, cap: int, stream: bool
                        ) -> _Opened:
        assert self.http, "RemoteTiers.start() was not awaited"
        pool = self.pools[tier]
        s = self.settings
        payload = upstream_payload(req, cap, pool.cfg.model or req.model, stream)
        tried: set[Upstream] = set()
        last: APIError | None = None
        overloaded = True
        read_timeout = s.stream_idle_timeout_s if stream else s.request_timeout_s
        headers = {"content-type": "application/json", "x-request-id": rid, **pool.auth}
        if stream:
            headers["accept"] = "text/event-stream"
        for attempt in range(1, s.max_attempts + 1):
            up = pool.pick(tried)
            if up is None:
                break
            tried.add(up)
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
                        raise _Failed(err, False)
                    overloaded &= resp.status_code in (429, 503)
                    last = err
                    outcome = "retried"
                    continue
                if stream:
                    it = resp.chunks()
                    first = b""
                    while not first:  # an upstream that closes at once counts as failed
                        first = await it.__anext__()
                    opened = _Opened(up, resp, first, attempt, it)
                else:
                    opened = _Opened(up, resp, await resp.read(), attempt)
                outcome = "ok"
                return opened
            except (UpstreamError, StopAsyncIteration) as exc:
                kind = type(exc).__name__
                outcome = "retried"
                if isinstance(exc, ReadTimeout):
                    last = APIError(504, "The upstream server timed out.", type="server_error",
                                    code="upstream_timeout")
                    if not stream:  # it had the whole request_timeout_s: do not start again
                        outcome = "error"
                        raise _Failed(last, False) from None
                else:
                    pool.mark_down(up, kind)
                    last = APIError(
                        503, "No upstream server could take the request: "
                        f"{kind} from the last one tried.", code="upstream_unavailable",
                        headers=retry_headers(self.config.server.retry_after_s))
                overloaded = False
            finally:
                if outcome != "ok":
                    self.attempts.labels(tier, up.url, outcome).inc()
                    up.outstanding -= 1
                    if resp is not None:
                        resp.close()
        if last is None:
            last = APIError(503, f"No upstream server is configured for the {tier} tier.",
                            code="upstream_unavailable",
                            headers=retry_headers(self.config.server.retry_after_s))
            overloaded = False
        raise _Failed(last, overloaded)


async def _unless(work: Awaitable[RemoteJob], gone: Awaitable[None]) -> RemoteJob | None:
    """``work``, or None if ``gone`` resolved first (``work`` is then cancelled)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(gone)
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if task.cancelled():
        return None
    return task.result()
