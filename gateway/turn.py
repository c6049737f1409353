"""The turn pipeline: one request through admission, streaming, settlement and errors.

Every protocol (``gateway.protocols``) and both transports run the same code:

    body ─ parse ─ validate ─ translate ─► TurnRequest ─ admit ─► Job ─┬─ wait ─► body
                                                                       └─ frames ─► SSE / websocket
    any APIError before the first byte ─► the protocol's error response
    any failure after it ─► the protocol's error event, logged; settlement exactly once

``Turn`` is transport-neutral (the websocket session drives it too); ``http_endpoint`` wraps it
for HTTP, as a ``StreamingResponse`` of pre-encoded bytes when streaming.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .admission import Gateway
from .errors import APIError
from .ids import new_id
from .job import Job
from .protocols.base import Encoder, Frames, Protocol, RequestContext, parse_json
from .request import TurnRequest

log = logging.getLogger("fastmode.turn")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def _same(frames: Frames) -> Frames:
    return frames


def internal_error(exc: BaseException) -> APIError:
    return APIError(500, f"Internal error: {type(exc).__name__}", code="internal_error")


class Turn:
    """One turn of one protocol, from a validated request to its last event."""

    def __init__(self, gateway: Gateway, protocol: Protocol, req: Any, ctx: RequestContext):
        self.gateway = gateway
        self.protocol = protocol
        self.req = req
        self.ctx = ctx
        self.request: TurnRequest = protocol.translate(req, ctx)
        self.job: Job | None = None
        self.encoder: Encoder | None = None
        self.opened = False  # the opening events went out

    def admit(self) -> Job:
        job = self.gateway.admit(self.request)
        self.job = job
        self.encoder = self.protocol.encoder(job, self.req, self.request)
        return job

    def headers(self, started: float) -> dict[str, str]:
        """The response headers of an admitted turn, the same for every protocol."""
        job = self.job
        assert job is not None
        h = {
            **self.protocol.id_headers(job.id),
            "x-fastmode-tier": job.tier.name,
            "openai-processing-ms": str(int((time.perf_counter() - started) * 1000)),
            **job.headers,
        }
        if job.downgraded:
            h["x-fastmode-requested-tier"] = job.requested_tier
        return h

    def settle(self, status: int) -> None:
        assert self.job is not None
        self.gateway.settle(self.job, status)

    def complete(self) -> None:
        """The job finished: settle it and let the protocol keep what it keeps."""
        job, enc = self.job, self.encoder
        assert job is not None and enc is not None
        self.settle(200)
        self.protocol.completed(job, self.req, enc, self.request, self.ctx)

    def frames(self) -> AsyncIterator[Frames]:
        """Opening events, token events as the engine produces them, closing events (the
        websocket sends each event as a frame)."""
        enc = self.encoder
        assert enc is not None
        return self._events(_same, enc.tokens)

    def sse(self) -> AsyncIterator[bytes]:
        """The same events as SSE bytes; token batches take the encoder's one-write path."""
        enc = self.encoder
        assert enc is not None
        return self._events(enc.sse, enc.sse_tokens)

    async def _events(self, frame: Callable[[Frames], Any],
                      tokens: Callable[[int, int], Any]) -> AsyncIterator[Any]:
        """A failure mid-stream ends with the protocol's error event; settlement happens exactly
        once however the iteration ends (finished, failed, or closed early by a client that
        went away)."""
        job, enc = self.job, self.encoder
        assert job is not None and enc is not None
        try:
            self.opened = True
            yield frame(enc.opening())
            async for start, times in job.tokens():
                yield tokens(start, len(times))
            self.complete()
            yield frame(enc.closing())
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:
            log.exception("turn %s failed while streaming", job.id)
            self.settle(500)
            yield frame(enc.failed(internal_error(exc)))
        finally:
            self.settle(499)  # a no-op unless the consumer stopped early

    async def wait(self, disconnected: Callable[[], Awaitable[None]]) -> bool:
        """Drain the job's tokens; False if ``disconnected`` returned first (job cancelled)."""
        job = self.job
        assert job is not None

        async def drain() -> None:
            async for _ in job.tokens():
                pass

        drain_task = asyncio.ensure_future(drain())
        watch = asyncio.ensure_future(disconnected())
        try:
            done, _ = await asyncio.wait({drain_task, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not drain_task.done():
                drain_task.cancel()
                job.cancel()
        return drain_task in done and not drain_task.cancelled()


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")


def http_endpoint(protocol: Protocol, fast_path: bool) -> Callable[[Request], Awaitable[Response]]:
    """The HTTP route of ``protocol`` (on /v1 or /fast/v1)."""

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        state = request.app.state
        gateway: Gateway = state.gateway
        request_id = new_id("req")
        try:
            body = parse_json(await request.body())
            req = protocol.validate(body)
            ctx = RequestContext(request.headers, fast_path, state.responses)
            turn = Turn(gateway, protocol, req, ctx)
            remote = state.remote
            if remote.serves(turn.request.model, turn.request.fast):
                if protocol.name != "chat":
                    raise remote.unsupported(protocol.name)
                return await remote.chat(request, body, req, turn.request, started)
            job = turn.admit()
        except APIError as exc:
            return protocol.error_response(exc, request_id)
        headers = turn.headers(started)
        if not turn.request.stream:
            try:
                finished = await turn.wait(lambda: _disconnected(request))
                if not finished:
                    turn.settle(499)
                    return Response(status_code=499)
                turn.complete()
                assert turn.encoder is not None
                headers["x-fastmode-cost-usd"] = f"{job.cost_usd:.8f}"
                return json_response(turn.encoder.body(), headers=headers)
            finally:
                turn.settle(499)  # a no-op unless something above failed
        return StreamingResponse(turn.sse(), media_type="text/event-stream",
                                 headers={**SSE_HEADERS, **headers})

    endpoint.__name__ = f"{protocol.name}{'_fast' if fast_path else ''}"
    return endpoint
