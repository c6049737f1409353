"""The HTTP side of the turn pipeline: the route of each protocol, and its streaming response.

``TurnStream`` is Starlette's ``StreamingResponse`` of pre-encoded bytes (the measured fastest
way to stream here, see ``gateway.app``) with three additions, none per token:

* it marks each write (``turn.writing_since``) so the watchdog can tell a reader that stopped
  reading: a write still pending after ``server.stream_max_lag_s`` means the client's socket
  buffer is full; the watchdog cancels that write and the stream ends (``ended = cut``);
* a ``cut`` fault ends the response without its last chunk, so the client sees a dropped
  connection (no terminal event, no ``[DONE]``);
* the task writing the stream is the turn's ``writer``;
* token events of a reader that keeps up are written from the engine's step (``push``, see
  ``gateway.pipeline.push``), not by this response's task.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, cast

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from fastmode.gateway.edge.connections import DirectResponse, hang_up_hook, on_hang_up
from fastmode.gateway.endpoints.background import Background
from fastmode.gateway.engines.tickets import ClientGone
from fastmode.gateway.errors import APIError
from fastmode.gateway.fault_kinds import Kind
from fastmode.gateway.http.offload import (
    OFFLOAD_BYTES,
    caller_of,
    counted,
    off_loop,
    validated,
)
from fastmode.gateway.money import cost_text
from fastmode.gateway.pipeline.admission import Gateway, shutting_down
from fastmode.gateway.pipeline.turn import Turn
from fastmode.gateway.protocols.base import Protocol, RequestContext
from fastmode.gateway.protocols.events import unchunked
from fastmode.gateway.state import CUT, FAILED
from fastmode.gateway.stored.ownership import deferred
from fastmode.gateway.values.ids import new_id

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_SSE_RAW = [(k.encode(), v.encode()) for k, v in SSE_HEADERS.items()]
_SSE_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")
# The server's own ``send``, put in the scope by the app (``gateway.app``) while none of its
# middleware rewrites a response body: token events are written with it, past the per-message
# wrappers Starlette's middleware puts around ``send`` (they only watch for the response start,
# which still goes through them), and from the engine's step (push mode). Without it (a
# middleware that may rewrite bodies, e.g. GZip), every byte goes through ``send``, from the
# turn's own task.
RAW_SEND = "fastmode.send"
# (a type spelled once: ``cast`` evaluates its type argument at every call)
_Write = Callable[[Message], Coroutine[Any, Any, None]]


class TurnStream(StreamingResponse):
    def __init__(self, turn: Turn, headers: dict[str, str], raw_send: Send | None = None) -> None:
        # (Starlette's ``__init__``, for this one kind of body and headers: it spent ~5 us
        # per request on an ABC check and a generic header build)
        # push mode only with the raw send: a middleware's send must run in the turn's task
        self.body_iterator = turn.sse(self.push if raw_send is not None else None)
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.raw_headers = [*_SSE_RAW, *[(k.lower().encode("latin-1"), v.encode("latin-1"))
                                         for k, v in headers.items()], _SSE_TYPE]
        self.turn = turn
        self.raw_send = raw_send
        # the server's send: a coroutine function (ASGI servers define it with ``async def``)
        self._write: Callable[[Message], Coroutine[Any, Any, None]] | None = None
        # token events straight to the connection's transport (``gateway.edge.connections``)
        self._direct: Callable[[bytes], bool] | None = None
        # the response's start and end straight to it too (``DirectResponse``)
        self._ends: DirectResponse | None = None
        # ... and pushed token events as the HTTP chunks the encoder keeps (``wire_chunks``):
        # the request's cycle, its flow control and its transport's write
        self._chunks: tuple[Any, Any, Callable[[bytes], object]] | None = None
        self._task: asyncio.Task[Any] | None = None  # the task streaming it (``__call__``)
        encoder = turn.encoder
        assert encoder is not None
        self._tokens = encoder.sse_tokens
        self._chunk_tokens = encoder.chunk_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream in this task; a client going away cancels it, which settles the turn as the
        client's cancel. Under ``fastmode serve`` the connection itself says so
        (``gateway.edge.connections``: its ``connection_lost`` calls the hook put on the request's
        cycle), nothing per request; under another server a second task listens for
        ``http.disconnect`` (what Starlette does with an anyio task group, for a tenth of its
        cost)."""
        task = asyncio.current_task()
        assert task is not None
        gone = False

        def hang_up() -> None:
            nonlocal gone
            if not gone:
                gone = True
                task.cancel()

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            hang_up()

        cycle = on_hang_up(receive, hang_up)
        listener = None if cycle is not None else task.get_loop().create_task(listen())
        if cycle is not None and self.raw_send is not None:  # no middleware rewrites bodies
            ends = self._ends = DirectResponse(cycle)
            self._direct = ends.write
            encoder = self.turn.encoder  # (a recorded turn's events go through the tape)
            if self.turn.tape is None and encoder is not None and encoder.wire_chunks():
                self._chunks = (cycle, ends.flow, ends.transport.write)
        self._task = task
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not gone or task.uncancel() > 0:
                raise
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
        finally:
            if listener is not None:
                listener.cancel()
            else:
                hang_up_hook(cycle, None)

    def push(self, start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None] | None:
        """Push mode (``gateway.pipeline.push``): these tokens' events (after ``lead``) written to the
        connection now (None), or the send of them, which the engine's step runs."""
        chunks = self._chunks
        if chunks is not None and lead is None:  # framed as the encoder kept them
            chunk = self._chunk_tokens(start, count)
            # ``DirectResponse.write_chunk``, inline: this runs once per event
            cycle, flow, write = chunks
            if not (flow.write_paused or cycle.disconnected or cycle.response_complete
                    or cycle.chunked_encoding is not True):
                if chunk:
                    write(chunk)
                return None
            body = unchunked(chunk)
            return self._write({"type": "http.response.body",  # type: ignore[misc]
                                "body": body, "more_body": True})
        body = self._tokens(start, count) if lead is None else lead + self._tokens(start, count)
        direct = self._direct
        if direct is not None and direct(body):
            return None
        return self._write({"type": "http.response.body",  # type: ignore[misc]
                            "body": body, "more_body": True})

    async def stream_response(self, send: Send) -> None:
        turn = self.turn
        # the task ``__call__`` runs in (this one), kept there: asyncio's ``current_task`` and
        # ``get_running_loop`` each ask the OS for the process id (a syscall) on Python 3.11
        task = self._task
        assert task is not None  # (only ``__call__`` calls this)
        turn.writer = task
        clock = task.get_loop().time
        ends = self._ends
        if ends is None or not ends.start(self.raw_headers):
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
        write = self.raw_send or send  # token events skip the middleware's send wrappers
        self._write = cast(_Write, write)
        direct = self._direct
        ended = False
        try:
            async for chunk in self.body_iterator:
                turn.writing_since = clock()
                if turn.closing and not ended:  # the last events end the body: one write
                    ended = True
                    if ends is None or not ends.end(chunk):  # type: ignore[arg-type]
                        await send({"type": "http.response.body", "body": chunk,
                                    "more_body": False})
                elif direct is None or not direct(chunk):  # type: ignore[arg-type]
                    await write({"type": "http.response.body", "body": chunk, "more_body": True})
                turn.writing_since = 0.0
        except asyncio.CancelledError:
            # the watchdog's cancel of a write to a reader that stopped reading: end here,
            # without the last chunk (uvicorn then closes the connection)
            if turn.abort is not None and task is not None and task.uncancel() == 0:
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                return
            raise
        finally:
            turn.writer = None
        if turn.cut or ended:
            return  # a `cut` fault: the connection drops mid-stream
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class Truncated(Response):
    """A non-streamed answer cut mid-body (the ``cut`` fault): the client sees the connection
    drop before ``content-length`` bytes arrived."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body[: len(self.body) // 2],
                    "more_body": True})


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def prefetch(req: Any, ctx: RequestContext) -> None:
    """Load a ``previous_response_id`` from the shared state before the (sync) translation
    (a request without a valid key is a 401 here: nothing is looked up for it)."""
    rid = req.__dict__.get("previous_response_id")  # (a pydantic getattr miss is slow)
    if isinstance(rid, str) and rid:
        await ctx.store.load(rid)


async def read_body(receive: Receive) -> bytes:
    """The request body, as ``Request.body()`` reads it but without its async generator and
    ``aclosing`` (a body comes in one message but for large ones): a client that left first
    raises ``ClientDisconnect``."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()


def plain_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """A request's headers as a dict, read once: a turn looks up five or six of them (the
    key, the tier, a fault, a test id, a trace), and Starlette's ``Headers`` scans and decodes
    the whole list at each lookup. Names come lower-cased from the server (ASGI); the first of
    a repeated header wins, as ``Headers.get`` has it."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(raw)}


def http_endpoint(protocol: Protocol, fast_path: bool) -> Callable[[Request], Awaitable[Response]]:
    """The HTTP route of ``protocol`` (on /v1 or /fast/v1)."""

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        arrived = time.monotonic()
        state = request.app.state
        gateway: Gateway = state.gateway
        request_id = new_id("req")
        raw = b""
        echo = gateway.config.server.engine and request.headers.get("x-request-id")
        if echo:  # an engine answers with the caller's id, as vLLM does
            request_id = echo

        def gone() -> Awaitable[None]:
            return _disconnected(request)

        try:
            if gateway.draining:
                raise shutting_down()
            raw = await read_body(request.receive)
            # parse, bounds, validation and translation leave the loop for a large body (a
            # small one's stay inline: no coroutine for them)
            inline = len(raw) <= OFFLOAD_BYTES
            limits = gateway.config.limits
            asked = plain_headers(request.scope["headers"])
            caller = caller_of(asked)  # whose checks and counts are remembered for its next turn
            req = (validated(protocol, raw, limits, caller) if inline
                   else await off_loop(len(raw), validated, protocol, raw, limits, caller))
            # stored responses as this request's key sees them (gateway.ownership)
            store = state.responses.seen_by(deferred(gateway.auth, asked))
            ctx = RequestContext(asked, fast_path, store)
            if req.__dict__.get("previous_response_id"):  # (a pydantic getattr miss is slow)
                await prefetch(req, ctx)
            if req.__dict__.get("background"):  # Responses' background mode
                background: Background = state.background
                return await background.create(protocol, req, ctx, request_id, started)
            make = partial(counted, gateway.spec.max_context_window, protocol.name, Turn, gateway, protocol, req, ctx,
                           caller=caller, request_id=request_id, arrived=arrived)
            turn = make() if inline else await off_loop(len(raw), make)
            if turn.trace is not None:  # the body, kept on opt-in (gateway.observe.tracing)
                turn.trace.sent = raw
            job = await turn.start(disconnected=gone)
        except APIError as exc:  # the body as sent goes with it (told: logged, traced)
            return protocol.error_response(exc, request_id).of(raw, arrived)
        except ClientGone:
            return Response(status_code=499)
        headers = turn.headers(started)
        if echo:
            headers["x-request-id"] = echo
        if turn.request.stream:
            return TurnStream(turn, headers, request.scope.get(RAW_SEND))
        try:
            finished = await turn.wait(gone)
            if turn.abort is not None and not job.finished:
                error = turn.abort[0]
                turn.settle_aborted()
                return protocol.error_response(error, request_id)
            if not finished:
                turn.settle(499)
                return Response(status_code=499)
            return await _whole(turn, headers, request_id)
        finally:
            turn.settle_aborted()  # a no-op unless something above failed

    endpoint.__name__ = f"{protocol.name}{'_fast' if fast_path else ''}"
    return endpoint


async def _whole(turn: Turn, headers: dict[str, str], request_id: str) -> Response:
    """The non-streamed body, with the mid-stream faults as they apply to a whole answer."""
    fault, enc, job = turn.stream_fault, turn.encoder, turn.job
    assert enc is not None and job is not None
    if fault is not None and fault.kind is Kind.STALL:
        await asyncio.sleep(fault.seconds(turn.gateway.config.faults.stall_s))
    if fault is not None and fault.kind is Kind.ERROR_EVENT:
        turn.settle(500, FAILED, "fault")
        return turn.protocol.error_response(turn.gateway.faults.stream_error(fault), request_id)
    if fault is not None and fault.kind is Kind.CUT:
        turn.settle(499, CUT, "fault")
        body = orjson.dumps(enc.body())
        return Truncated(body, 200, headers=headers, media_type="application/json")
    turn.complete()
    headers["x-fastmode-cost-usd"] = cost_text(job.cost_usd)
    body = orjson.dumps(enc.body())
    if turn.tape is not None:  # --record (a turn with a fault has none)
        turn.tape.whole(body, asyncio.get_running_loop().time())
    if fault is not None and fault.kind is Kind.MALFORMED:
        body = body[: len(body) // 2]
    if turn.trace is not None:  # the whole body is one write (gateway.tracing)
        turn.trace.whole(job, time.monotonic())
        turn.gateway.traces.keep(turn.trace)
    return Response(body, 200, headers=headers, media_type="application/json")
