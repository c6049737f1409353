"""What a protocol plug-in is: a request schema, a translation to ``TurnRequest``, an encoder.

Every front end (OpenAI Chat, OpenAI Responses over SSE and websocket, Anthropic Messages) is a
``Protocol``. The shared turn pipeline (``gateway.turn``) runs admission, streaming, cancellation,
settlement and error mapping for all of them, so a feature that touches the turn is written once;
a protocol only says how its wire format looks.

Events are ``Frames``: a list of ``(event type, JSON body)`` pairs. The SSE transport frames them
as ``event:``/``data:`` lines (or ``data:`` alone for Chat Completions), the websocket as one text
frame per event.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.responses import Response

from ..errors import APIError, bad_request
from ..job import Job
from ..request import TurnRequest

if TYPE_CHECKING:
    from ..response_store import ResponseStore

Frames = list[tuple[str, bytes]]


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
    """One job's wire events. ``closing`` runs after settlement, so its usage is final."""

    named_events: ClassVar[bool] = True  # SSE ``event:`` lines (Chat Completions has none)

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

    def sse(self, frames: Frames) -> bytes:
        if self.named_events:
            return b"".join(b"event: " + t.encode() + b"\ndata: " + b + b"\n\n" for t, b in frames)
        return b"".join(b"data: " + b + b"\n\n" for _, b in frames)

    def sse_tokens(self, start: int, count: int) -> bytes:
        """The hot path: one write for a batch of tokens. Encoders may override it with a
        specialised version; the default frames ``tokens``."""
        return self.sse(self.tokens(start, count))


class Protocol(ABC):
    """A front end: its schema, its translation to ``TurnRequest`` and its encoder."""

    name: ClassVar[str]
    schema: ClassVar[type[BaseModel]]

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

    def error_response(self, error: APIError, request_id: str) -> Response:
        return Response(orjson.dumps(self.error_body(error, request_id)), self.status(error),
                        headers={**error.headers, **self.id_headers(request_id)},
                        media_type="application/json")

    def id_headers(self, request_id: str) -> dict[str, str]:
        return {"x-request-id": request_id}

    def status(self, error: APIError) -> int:
        return error.status


def parse_json(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise bad_request("The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(
            f"We could not parse the JSON body of your request ({exc}). The API expects a "
            "JSON payload."
        ) from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body


def validate(model: type[BaseModel], body: dict[str, Any]) -> Any:
    """Validate ``body`` or raise a 400 naming the first offending field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = _param([p for p in err["loc"] if isinstance(p, int) or _FIELD.match(p)])
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
                param=param,
            )
        return forced
    if literal is None:
        return "auto" if names else "none"
    if literal == "required" and not names:
        raise bad_request(f"Invalid value for '{param}': 'required' needs 'tools'.", param=param)
    return literal


def tool_call_messages(calls: Any) -> dict[str, Any]:
    """An assistant message carrying tool calls, in the chat shape the mock model reads."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }
