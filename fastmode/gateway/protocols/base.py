"""What a protocol plug-in is: a request schema, a translation to ``TurnRequest``, an encoder.

Every front end (OpenAI Chat, OpenAI Responses over SSE and websocket, Anthropic Messages) is a
``Protocol``. The shared turn pipeline (``gateway.pipeline.turn``) runs admission, streaming, cancellation,
settlement and error mapping for all of them, so a feature that touches the turn is written once;
a protocol only says how its wire format looks.

Events are ``Frames``: a list of ``(event type, JSON body)`` pairs. The SSE transport frames them
as ``event:``/``data:`` lines (or ``data:`` alone for Chat Completions), the websocket as one text
frame per event. Token events take a fast path common to every encoder (``gateway.protocols.events``):
encoded ahead a run at a time, sent as slices, grouped ``stream_interval`` tokens to an event.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from fastmode.backends.mockmodel import Generation, Piece
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.observe.rejections import Rejection, rejection
from fastmode.gateway.protocols.events import (
    CHUNK,
    EventBuffer,
    Frames,
    Merged,
    Runs,
    buffered,
    chunk_framed,
    chunked,
    grouped,
    runs_of,
    sse_framed,
    sse_head,
    texts,
    unchunked,
    wired,
)
from fastmode.gateway.protocols.vocabulary import OPENAI_SERVICE_TIERS
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest
from fastmode.gateway.values.roles import Vocabulary

if TYPE_CHECKING:
    from fastmode.gateway.stored.response_store import ResponseStore



class Lenient(BaseModel):
    """Unknown fields are accepted and ignored (SDKs add new ones faster than mocks follow), but
    every field we read is checked."""

    model_config = ConfigDict(extra="allow")


@dataclass
class RequestContext:
    """What a translation may read besides the body."""

    headers: Mapping[str, str]
    fast_path: bool  # the request came in on /fast/v1
    store: ResponseStore  # earlier responses, for previous_response_id


class Encoder(ABC):
    """One job's wire events. ``closing`` runs after settlement, so its usage is final.

    ``tokens`` loops on ``self.pieces(start, stop, out)`` (``out``: the list its events go in):
    that loop is what groups ``interval`` tokens to an event and tells the fast path which
    events belong to which token. The stream asks for ``sse_tokens`` / ``frame_tokens``."""

    named_events: ClassVar[bool] = True  # SSE ``event:`` lines (Chat Completions has none)
    # Chat Completions' first chunk (the assistant role) arrives with the first token, as
    # OpenAI sends it: clients such as `vllm bench serve --backend openai-chat` time TTFT from
    # the first chunk. Responses and Messages announce the response at once.
    opening_at_first_token: ClassVar[bool] = False
    job: Job
    interval: int = 1  # tokens per event: the tier's ``stream_interval`` (set by the turn)
    # the event buffer's (``events.EventBuffer``): while it encodes a run, where each token's
    # events begin; and the buffer itself, made on first use (``events.buffered``)
    marks: list[tuple[int, int]] | None = None
    buffer: EventBuffer | None = None
    _runs: Runs | None = None
    # the stream goes out as SSE: ``tokens`` may write an event as its SSE bytes (kind
    # ``WIRE``); set by the event buffer, never for the websocket
    sse_wire: bool = False
    # ... and the connection writes its events itself (``wire_chunks``): ``tokens`` may write
    # an event as its HTTP chunk (kind ``CHUNK``)
    chunk_wire: bool = False

    def pieces(self, start: int, stop: int,
               out: Frames | None = None) -> Iterator[tuple[int, Piece | Merged]]:
        """(index, piece) for each event of tokens ``start .. stop`` of the reply: every token
        with ``interval`` 1; with N, a run of text (or of one tool call's arguments) inside a
        group of N merged into one piece, at the index of its last token."""
        runs = self._runs
        if runs is None and self.interval > 1 and isinstance(self.job.gen, Generation):
            runs = self._runs = runs_of(self.job.gen.pieces)  # once per reply
        return grouped(self.job.gen.pieces, start, stop, self.interval, self.marks, out, runs)

    def ran_ahead(self) -> int | None:
        """If this encoder made events beyond those it handed to the transport: how many
        tokens' events it handed out (its state must be rewound there); else None."""
        buf = self.buffer
        return buf.served if buf is not None and buf.encoded > buf.served else None

    def opening(self) -> Frames:
        return []

    @abstractmethod
    def tokens(self, start: int, count: int) -> Frames:
        """Events for tokens ``start .. start+count`` of the reply."""

    @abstractmethod
    def closing(self) -> Frames:
        """Events after the last token: the finish reason, final usage, the end marker."""

    @abstractmethod
    def body(self) -> dict[str, Any]:
        """The whole (non-streaming) response body."""

    @abstractmethod
    def failed(self, error: APIError) -> Frames:
        """The protocol's error event inside a stream that has started."""

    def cancelled(self) -> Frames:
        """The terminal event of a turn the client cancelled (websocket ``response.cancel``)."""
        return []

    def wire_prefix(self, kind: str, prefix: bytes) -> bytes:
        """``prefix`` (the start of an event's JSON body) with the event's SSE lines before
        it: for a ``WIRE`` event, whose body then ends with ``b"\\n\\n"``."""
        return sse_head(kind, self.named_events) + prefix

    def framed(self, frames: Frames) -> list[bytes]:
        return sse_framed(frames, self.named_events)

    def chunk_framed(self, frames: Frames) -> list[bytes]:
        """Each event as one HTTP/1.1 chunk of its SSE bytes (``chunk_tokens``)."""
        rest = [f for f in frames if f[0] is not CHUNK]
        return chunk_framed(self.framed(rest) if rest else [], frames)

    def sse(self, frames: Frames) -> bytes:
        return b"".join(self.framed(frames))

    def sse_tokens(self, start: int, count: int) -> bytes:
        """The hot path over SSE: the events of tokens ``start .. start+count`` as one write,
        a slice of what ``EventBuffer`` encoded ahead. Tokens are asked for in order."""
        buf = self.buffer
        if buf is None or buf.mode != "sse":
            if buf is not None and buf.mode == "chunk":  # kept as chunks: their bytes
                return unchunked(self.chunk_tokens(start, count))
            buf = wired(self, "sse")
            if buf is None:
                return self.sse(self.tokens(start, count))
        stop = start + count
        if stop <= buf.encoded and start >= buf.tok0:  # the common case, inline
            buf.served = stop
            index, t0 = buf.index, buf.tok0
            f0, f1 = index[start - t0], index[stop - t0]
        else:
            f0, f1 = buf.span(self, start, stop)
        wire = buf.wire
        return wire[f0] if f1 == f0 + 1 else b"".join(wire[f0:f1])

    def wire_chunks(self) -> bool:
        """The stream's connection writes its token events itself (``gateway.edge.
        connections.DirectResponse``): the buffer keeps each event as its HTTP/1.1 chunk from
        now on (``chunk_tokens``); False if it keeps none (a reply still arriving)."""
        return wired(self, "chunk") is not None

    def chunk_tokens(self, start: int, count: int) -> bytes:
        """``sse_tokens`` as one HTTP/1.1 chunk (nothing for no event), once ``wire_chunks``:
        one event, the write of every token at ``stream_interval`` 1, is a slice framed
        already; several are one chunk of their bytes, as a write of them is framed."""
        buf = self.buffer
        if buf is None or buf.mode != "chunk":
            return chunked(self.sse_tokens(start, count))
        stop = start + count
        if stop <= buf.encoded and start >= buf.tok0:  # the common case, inline
            buf.served = stop
            index, t0 = buf.index, buf.tok0
            f0, f1 = index[start - t0], index[stop - t0]
        else:
            f0, f1 = buf.span(self, start, stop)
        if f1 == f0 + 1:
            return buf.wire[f0]  # type: ignore[no-any-return]
        return chunked(b"".join([unchunked(c) for c in buf.wire[f0:f1]]))

    def text_tokens(self, start: int, count: int) -> list[str]:
        """The same for the websocket's push mode: each event as its frame's text. (The common
        case is inlined here as in ``sse_tokens`` rather than shared through ``span``: a call
        per event measured 1.26x the bare app against 1.22x inline on the websocket.)"""
        buf = self.buffer
        if buf is None or buf.mode != "text":
            buf = wired(self, "text")
            if buf is None:
                return texts(self.tokens(start, count))
        stop = start + count
        if stop <= buf.encoded and start >= buf.tok0:  # the common case, inline
            buf.served = stop
            index, t0 = buf.index, buf.tok0
            f0, f1 = index[start - t0], index[stop - t0]
        else:
            f0, f1 = buf.span(self, start, stop)
        return buf.wire[f0:f1]

    def frame_tokens(self, start: int, count: int) -> Frames:
        """The same as frames (the websocket's turn task: opening, closing and token events
        of a reader that fell behind)."""
        buf = buffered(self)
        if buf is None:
            return self.tokens(start, count)
        f0, f1 = buf.span(self, start, start + count)
        return buf.frames[f0:f1]


class Protocol(ABC):
    """A front end: its schema, its translation to ``TurnRequest`` and its encoder."""

    name: ClassVar[str]
    schema: ClassVar[type[BaseModel]]
    # its words for the roles (``service_tier`` / ``speed``): read by translate and encoders
    vocabulary: ClassVar[Vocabulary] = OPENAI_SERVICE_TIERS

    def validate(self, body: dict[str, Any]) -> Any:
        return validate(self.schema, body)

    @abstractmethod
    def translate(self, req: Any, ctx: RequestContext) -> TurnRequest: ...

    @abstractmethod
    def encoder(self, job: Job, req: Any, turn: TurnRequest) -> Encoder: ...

    def completed(self, job: Job, req: Any, encoder: Encoder, turn: TurnRequest,
                  ctx: RequestContext) -> None:
        """Called once when a turn finished normally, before the closing events."""
        return None

    def error_body(self, error: APIError, request_id: str) -> dict[str, Any]:
        return error.body()

    def error_response(self, error: APIError, request_id: str) -> Rejection:
        """The error in this protocol's format; logged and traced when sent
        (``gateway.observe.rejections``)."""
        return rejection(self.name, error, request_id, self.error_body(error, request_id),
                         self.status(error), {**self.limit_headers(error.headers),
                                              **self.id_headers(request_id)})

    limit_prefix: ClassVar[str] = "anthropic-"  # rate-limit headers of the other provider

    def limit_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The rate-limit headers in this protocol's names (``gateway.values.auth`` makes both)."""
        drop = self.limit_prefix
        return {k: v for k, v in headers.items() if not k.startswith(drop)}

    def id_headers(self, request_id: str) -> dict[str, str]:
        return {"x-request-id": request_id}

    def status(self, error: APIError) -> int:
        return error.status




def validate(model: type[BaseModel], body: dict[str, Any], at: str = "") -> Any:
    """Validate ``body`` or raise a 400 naming the first offending field (under ``at``, the
    place of ``body`` in the request, e.g. ``tools[2]``)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = _param([p for p in err["loc"] if isinstance(p, int) or _FIELD.match(p)])
        if at:
            param = at if param == "body" else at + ("" if param.startswith("[") else ".") + param
        if err["type"] == "missing":
            msg = f"Missing required parameter: '{param}'."
        elif err["type"] == "extra_forbidden":
            msg = f"Unrecognized request argument supplied: {param}"
        else:
            msg = f"Invalid value for '{param}': {err['msg']}."
        raise APIError(400, msg, param=param, code=_code(err["type"])) from None


_FIELD = re.compile(r"^(?!(str|int|float|bool|list|dict|none)$)[a-z_][a-z0-9_]*$")


def _param(loc: list[Any]) -> str:
    out = ""
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "body"


def _code(kind: str) -> str:
    if kind == "missing":
        return "missing_required_parameter"
    if kind == "extra_forbidden":
        return "unknown_parameter"
    return "invalid_value"


def resolve_tool_choice(
    names: set[str], literal: str | None, forced: str | None, param: str = "tool_choice"
) -> str:
    """The generator's tool choice from a request's: ``none`` | ``auto`` | ``required`` | a name.

    ``literal`` is the string form (None when absent), ``forced`` the name of a named choice.
    Shared by the Chat, Responses and Messages front ends, which only differ in wire shape.
    """
    if forced is not None:
        if forced not in names:
            raise bad_request(
                f"Invalid value for '{param}': no function named '{forced}' was given in 'tools'.",
                param=param, code="invalid_value")
        return forced
    if literal is None:
        return "auto" if names else "none"
    if literal == "required" and not names:
        raise bad_request(f"Invalid value for '{param}': 'required' needs 'tools'.", param=param,
                          code="invalid_value")
    return literal


def tool_call_messages(calls: Any) -> dict[str, Any]:
    """An assistant message carrying tool calls, in the chat shape the mock model reads (a
    custom tool's call as Chat's ``custom: {name, input}``; a namespace kept on the call)."""
    return {"role": "assistant", "content": None, "tool_calls": [chat_call(c) for c in calls]}


def chat_call(call: Any) -> dict[str, Any]:
    """One ``ToolCall`` in the chat shape."""
    out: dict[str, Any]
    if call.kind == "custom":
        out = {"id": call.id, "type": "custom",
               "custom": {"name": call.name, "input": call.arguments}}
    else:
        out = {"id": call.id, "type": "function",
               "function": {"name": call.name, "arguments": call.arguments}}
    if call.namespace:
        out["namespace"] = call.namespace
    return out
