"""One websocket connection in Responses WebSocket mode: frames in, lanes of turns, events out.

Each turn runs through the same ``Turn`` pipeline as the HTTP routes (``gateway.pipeline.turn``); this
module adds only what a persistent connection needs: lanes, cancellation, limits and framing.
Faults apply per turn (the upgrade's ``x-fastmode-fault`` header, admin and config rules): a
status fault is an ``error`` event with that status; ``cut`` closes the socket (1011) mid-turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.websockets import WebSocket

from fastmode.gateway.edge.shutdown import Shutdown
from fastmode.gateway.edge.turn_http import RAW_SEND
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.netem import NetworkModel, network_time
from fastmode.gateway.http.offload import caller_of, checked, counted, off_loop, parse_frame
from fastmode.gateway.observe.rejections import told
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.pipeline.turn import Turn
from fastmode.gateway.pipeline.turn_errors import internal_error
from fastmode.gateway.protocols import RESPONSES, RequestContext
from fastmode.gateway.protocols.events import Frames
from fastmode.gateway.protocols.openai_responses import ResponsesRequest
from fastmode.gateway.state import FAILED
from fastmode.gateway.stored.ownership import Caller
from fastmode.gateway.stored.response_store import ConnectionStore, ResponseStore
from fastmode.gateway.values.ids import new_id
from fastmode.gateway.values.job import Job
from fastmode.gateway.websocket.life import ConnectionLife, limit_error

log = logging.getLogger("fastmode.websocket")

MAX_FRAME_BYTES = 16 * 1024 * 1024  # larger frames: close 1009 (uvicorn ws_max_size)
MAX_LANES = 16  # stream_id lanes running at once on one connection (OpenAI: 16)
MAX_PENDING = 64  # response.create accepted and not yet finished, per connection
RECENT_RESPONSES = 16  # responses a connection keeps in memory for previous_response_id
CLOSE_POLICY = 1008
CLOSE_CUT = 1011  # the `cut` fault, or a reader that stopped reading
EVENT_TYPES = ("response.create", "response.cancel")
_DROPPED_FIELDS = ("type", "stream_id", "stream", "stream_options")


@dataclass(eq=False)
class Lane:
    """A FIFO of turns on one ``stream_id`` (None: the default lane)."""

    sid: str | None
    # (request, frame size, loop time the frame arrived, the frame's body if traced)
    queue: asyncio.Queue[tuple[ResponsesRequest, int, float, Any]] = field(
        default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    active: bool = False  # a turn is between dequeue and its terminal event
    cancel_requested: bool = False  # response.cancel arrived before the job was admitted
    job: Job | None = None
    rid: str | None = None
    stream: asyncio.Task[None] | None = None


class _SocketGone(Exception):
    """Sending failed: the client closed the socket."""


def error_event(exc: APIError, sid: str | None = None) -> bytes:
    """``{"type": "error", "status": S, "error": {type, code, message, param[, headers]}}``."""
    err: dict[str, Any] = exc.body()["error"]
    if exc.headers:
        err["headers"] = exc.headers
    event: dict[str, Any] = {"type": "error", "status": exc.status, "error": err}
    if sid is not None:
        event["stream_id"] = sid
    return orjson.dumps(event)


class Session(ConnectionLife):
    """One websocket connection."""

    def __init__(
        self,
        websocket: WebSocket,
        gateway: Gateway,
        store: ResponseStore,
        fast: bool,
        network: NetworkModel,
        shutdown: Shutdown | None = None,
    ) -> None:
        self.ws = websocket
        self.shutdown = shutdown
        self.key = ""  # the API key (auth on), for the per-key connection cap
        self.last_frame = 0.0  # loop time of the last frame received (idle timeout)
        self.arrived = 0.0  # its monotonic time (a traced turn's arrival)
        self.stopping: APIError | None = None  # why new turns are refused (shutdown)
        self.gateway = gateway
        self.store = store
        self.cache = ConnectionStore(store, RECENT_RESPONSES)  # scoped once authenticated
        self.fast = fast
        self.network = network
        self.headers = {k: v for k, v in websocket.headers.items()}
        # traced turns keep their frame's body until traced (gateway.observe.tracing)
        self.traced = gateway.traces.begin(self.headers, "", "", "") is not None
        self.authorization = websocket.headers.get("authorization")
        self.max_age = gateway.config.server.max_connection_age_s
        self.lanes: dict[str | None, Lane] = {}
        self.pending = 0
        self.closing = False

    # -- connection -----------------------------------------------------------------------

    async def serve(self) -> None:
        if not await self._authenticate():
            return
        sessions = self.shutdown.sessions if self.shutdown is not None else set()
        sessions.add(self)
        try:
            if self.network.enabled:
                await asyncio.sleep(self.network.wall(self.network.ws_connect_s()))
            await self.ws.accept()
            self.last_frame = asyncio.get_running_loop().time()
            age = asyncio.create_task(self._age_limit())
            idle = asyncio.create_task(self._idle_limit())
            try:
                await self._read()
            finally:
                age.cancel()
                idle.cancel()
                tasks = [lane.task for lane in self.lanes.values() if lane.task is not None]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(age, idle, *tasks, return_exceptions=True)
        finally:
            sessions.discard(self)

    async def _authenticate(self) -> bool:
        """Check the upgrade's ``Authorization`` and the connection caps; refuse with the HTTP
        error body (401, 429, 503) if not."""
        try:
            principal = self.gateway.auth.authenticate(self.authorization)
            self.key = principal.key.key if principal is not None else ""
            # the connection's key owns what it stores and sees only its own (gateway.ownership)
            self.cache = ConnectionStore(self.store.seen_by(Caller.of(principal)),
                                         RECENT_RESPONSES)
            over = self._over_cap()
            if over is not None:
                raise over
            return True
        except APIError as exc:
            with contextlib.suppress(Exception):  # told: logged, traced (if traced)
                told(self.gateway, self.headers, "ws upgrade", new_id("req"), RESPONSES.name,
                     "websocket", exc.status, exc, exc.body()["error"])
            if "websocket.http.response" in self.ws.scope.get("extensions", {}):
                await self.ws.send_denial_response(exc.response())
            else:  # a server without the denial-response extension: error event, then 1008
                await self.ws.accept()
                await self._send_raw(error_event(exc))
                await self.ws.close(CLOSE_POLICY, exc.message[:120])
            return False

    async def _read(self) -> None:
        clock = asyncio.get_running_loop().time
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            self.last_frame = clock()
            self.arrived = time.monotonic()  # the frame's arrival, finer (gateway.tracing)
            text = message.get("text")
            if text is None:
                raw = message.get("bytes") or b""
                if len(raw) > MAX_FRAME_BYTES:
                    await self._too_big()
                    return
                try:
                    text = raw.decode()
                except UnicodeDecodeError:
                    await self._error(bad_request("Binary frames must hold UTF-8 JSON."))
                    continue
            elif len(text) > MAX_FRAME_BYTES:
                await self._too_big()
                return
            await self._handle(text)

    async def _too_big(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(1009, f"frame over {MAX_FRAME_BYTES} bytes")

    # -- frames ---------------------------------------------------------------------------

    async def _handle(self, text: str) -> None:
        try:  # a large frame is parsed, checked and translated off the loop (gateway.offload)
            body = await off_loop(len(text), parse_frame, text, self.gateway.config.limits)
        except APIError as exc:  # too many values to parse
            await self._error(exc)
            return
        except orjson.JSONDecodeError as exc:
            await self._error(bad_request(f"The frame is not valid JSON ({exc}).",
                                          code="invalid_json"))
            return
        if not isinstance(body, dict):
            await self._error(bad_request("Each frame must be a JSON object with a 'type'.",
                                          param="type"))
            return
        sid = body.get("stream_id")
        if sid is not None and (not isinstance(sid, str) or not 0 < len(sid) <= 64):
            await self._error(bad_request("Invalid value for 'stream_id': expected a string of "
                                          "1 to 64 characters.", param="stream_id",
                                          code="invalid_value"))
            return
        kind = body.get("type")
        if kind == "response.create":
            await self._create(body, sid, len(text))
        elif kind == "response.cancel":
            await self._cancel(body, sid)
        else:
            await self._error(bad_request(
                f"Invalid value for 'type': {kind!r}. Supported client events: "
                f"{', '.join(EVENT_TYPES)}.", param="type", code="invalid_value"), sid)

    async def _create(self, body: dict[str, Any], sid: str | None, size: int = 0) -> None:
        if body.get("background"):
            await self._error(bad_request("'background' is not supported over WebSocket.",
                                          param="background"), sid)
            return
        try:
            fields = {k: v for k, v in body.items() if k not in _DROPPED_FIELDS}
            req: ResponsesRequest = await off_loop(size, checked, RESPONSES, fields,
                                                   self.gateway.config.limits, None,
                                                   caller_of(self.headers))
        except APIError as exc:
            await self._error(exc, sid, body)
            return
        if self.stopping is not None:
            await self._error(self.stopping, sid)
            return
        if self.closing:
            await self._error(limit_error(self.max_age), sid)
            return
        if self.pending >= MAX_PENDING:
            await self._error(bad_request(
                f"Too many responses queued on this connection (at most {MAX_PENDING}).",
                code="too_many_pending_responses"), sid)
            return
        lane = self.lanes.get(sid)
        if lane is None:
            if len(self.lanes) >= MAX_LANES:
                await self._error(bad_request(
                    f"At most {MAX_LANES} stream_id lanes may be active on a connection.",
                    param="stream_id", code="too_many_streams"), sid)
                return
            lane = Lane(sid)
            self.lanes[sid] = lane
            lane.task = asyncio.create_task(self._worker(lane))
        self.pending += 1
        lane.queue.put_nowait((req, size, self.arrived, body if self.traced else None))

    async def _cancel(self, body: dict[str, Any], sid: str | None) -> None:
        rid = body.get("response_id")
        if rid is not None:
            lane = next((ln for ln in self.lanes.values() if ln.rid == rid), None)
        else:
            lane = self.lanes.get(sid)
        if lane is None or not lane.active:
            await self._error(bad_request(
                "There is no active response to cancel"
                + (f" with id '{rid}'." if rid else " on this stream."),
                code="response_cancel_not_active"), sid, where="ws response.cancel")
            return
        if lane.job is not None and lane.stream is not None:
            lane.job.cancel()
            lane.stream.cancel()
        else:
            lane.cancel_requested = True

    # -- turns ----------------------------------------------------------------------------

    async def _worker(self, lane: Lane) -> None:
        try:
            while not lane.queue.empty():
                req, size, arrived, body = lane.queue.get_nowait()
                try:
                    await self._turn(lane, req, size, arrived, body)
                except _SocketGone:
                    return  # the reader sees the disconnect and cleans up
                except Exception as exc:  # a bug: say so on the socket and in the log
                    log.exception("websocket turn failed")
                    with contextlib.suppress(Exception):
                        await self._error(internal_error(exc), lane.sid)
                finally:
                    self.pending -= 1
        finally:
            if self.lanes.get(lane.sid) is lane:
                del self.lanes[lane.sid]

    async def _turn(self, lane: Lane, req: ResponsesRequest, size: int = 0,
                    arrived: float | None = None, body: Any = None) -> None:
        sid = lane.sid
        lane.active, lane.cancel_requested = True, False
        try:
            if self.closing:
                await self._error(limit_error(self.max_age), sid)
                return
            await self._run(lane, req, sid, size, arrived, body)
        finally:
            lane.active = False
            lane.job = lane.stream = lane.rid = None

    async def _run(self, lane: Lane, req: ResponsesRequest, sid: str | None,
                   size: int = 0, arrived: float | None = None, body: Any = None) -> None:
        ctx = RequestContext(self.headers, self.fast, self.cache)
        try:
            if self.stopping is not None:
                raise self.stopping
            if req.previous_response_id:
                await self.cache.load(req.previous_response_id)
            turn = await off_loop(size, counted, self.gateway.spec.max_context_window, RESPONSES.name, Turn,
                                  self.gateway, RESPONSES, req, ctx, transport="websocket",
                                  caller=caller_of(self.headers), arrived=arrived)
            delay = self.network.ws_turn_s() if self.network.enabled else 0.0
            if delay:
                await asyncio.sleep(self.network.wall(delay))
            network_time.set(delay)  # this task's context: read by Gateway.admit
            if turn.trace is not None:  # the frame, kept on opt-in (gateway.observe.tracing)
                turn.trace.sent = body
            # faults, then admission on the tier's engine or (remote tier) its upstreams
            job = await turn.start(stream=True)
        except APIError as exc:
            self._evict(req)
            await self._error(exc, sid, body, req.model)
            return
        assert turn.encoder is not None
        stream = asyncio.create_task(self._pump(turn, sid))
        lane.job, lane.rid, lane.stream = job, getattr(turn.encoder, "rid", None), stream
        if lane.cancel_requested:
            job.cancel()
            stream.cancel()
        try:
            await asyncio.wait({stream})
            failure = None if stream.cancelled() else stream.exception()
            if failure is not None:
                raise failure
            if turn.cut or (stream.cancelled() and turn.abort is not None):
                turn.settle_aborted()  # a `cut` fault, or a reader that stopped reading
                await self._drop()
                return
            if not stream.cancelled():
                if job.ended == FAILED:  # closed with response.failed
                    self._evict(req)
                return  # the turn ran to its closing (or error) events
            turn.settle(499)  # cancelled: billed for the tokens sent
            if not turn.opened:  # cancelled before response.created went out
                await self._send(turn.encoder.opening(), sid)
            await self._send(turn.encoder.cancelled(), sid)
        finally:
            stream.cancel()
            turn.settle(499)  # once only: a no-op unless the socket went away

    def _evict(self, req: ResponsesRequest) -> None:
        """A failed continuation drops what it continued from this connection's memory (as
        OpenAI's: continuing it again is ``previous_response_not_found`` unless stored)."""
        if req.previous_response_id:
            self.cache.forget(req.previous_response_id)

    async def _pump(self, turn: Turn, sid: str | None) -> None:
        turn.writer = asyncio.current_task()
        clock = asyncio.get_running_loop().time
        enc = turn.encoder
        assert enc is not None
        texts = enc.text_tokens
        raw = self.ws.scope.get(RAW_SEND)  # absent under a middleware that may rewrite
        send = raw or self.ws.send

        def push(start: int, count: int, lead: Frames | None) -> Coroutine[Any, Any, None]:
            """Push mode (``gateway.pipeline.push``): the send of these tokens' events (after ``lead``),
            which the engine's step runs; one event (the usual case) is the server's send
            itself."""
            events = texts(start, count)
            if lead is not None:
                events = [body.decode() for _, body in lead] + events
            if sid is None and len(events) == 1:
                return send({"type": "websocket.send", "text": events[0]})
            return self._send_texts(events, sid)

        events = turn.frames(push if raw is not None else None)
        try:
            async for frames in events:
                turn.writing_since = clock()  # the watchdog cuts a write pending too long
                await self._send(frames, sid)
                turn.writing_since = 0.0
        except Exception as exc:
            if exc is turn.write_error:  # a pushed write's: the socket went away
                raise _SocketGone() from exc
            raise
        finally:
            turn.writer = None
            await events.aclose()  # type: ignore[attr-defined]

    async def _drop(self) -> None:
        """Close the connection mid-turn (no terminal event): bounded, the peer may not read."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(CLOSE_CUT, "stream cut"), 1.0)

    # -- sending --------------------------------------------------------------------------

    async def _send(self, events: Frames, sid: str | None) -> None:
        """One text frame per event, with the server's own ``send`` (``RAW_SEND``): a turn's
        events skip Starlette's per-message checks and middleware wrappers (the socket is open:
        the session accepted it; a closed one makes the server's send raise)."""
        await self._send_texts([body.decode() for _, body in events], sid)

    async def _send_texts(self, events: list[str], sid: str | None) -> None:
        send = self.ws.scope.get(RAW_SEND) or self.ws.send
        try:
            if sid is None:
                for text in events:
                    await send({"type": "websocket.send", "text": text})
            else:
                tail = ',"stream_id":' + orjson.dumps(sid).decode() + "}"
                for text in events:
                    await send({"type": "websocket.send", "text": text[:-1] + tail})
        except Exception as exc:  # closed socket: uvicorn raises several kinds
            raise _SocketGone() from exc

    async def _send_raw(self, body: bytes) -> None:
        try:
            await self.ws.send({"type": "websocket.send", "text": body.decode()})
        except Exception as exc:  # closed socket: uvicorn raises several kinds
            raise _SocketGone() from exc

    async def _error(self, exc: APIError, sid: str | None = None, body: Any = None,
                     model: str = "", where: str = "ws response.create") -> None:
        """An ``error`` event, told (logged; traced if the connection is:
        ``gateway.observe.rejections``)."""
        event = error_event(exc, sid)
        with contextlib.suppress(Exception):  # telling never costs the client its answer
            told(self.gateway, self.headers, where, new_id("req"), RESPONSES.name,
                 "websocket", exc.status, exc, exc.body()["error"], sent=body, model=model,
                 arrival=self.arrived or None)
        await self._send_raw(event)
