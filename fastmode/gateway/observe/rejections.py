"""A refused request, told: one log line, and a trace when the request is traced.

A client that gets a 400 needs to know which field of what it sent was refused, and which
client sent it. Every error answer of the HTTP routes is rendered by ``Protocol.error_response``
(the route's own format: OpenAI's body, Anthropic's), which returns a ``Rejection``: a plain
response that, when it is sent, has the request's scope and so can say

* at INFO on ``fastmode.requests``, for a 4xx, one line (never a traceback)::

      rejected 400 POST /v1/messages param=messages[1].role ua="claude-cli/2.1.197"
      message="Invalid value for 'messages[1].role': ..."

  (the message cut to ``MESSAGE_CHARS``; ``fastmode serve --log-level info`` shows it);
* to the traces (``Traces.rejected``), when the request is traced: its status, the error as the
  client got it, its protocol, the model it asked for, its user agent (and, opted in, its
  body), owned by the key it sent.

The websocket's ``error`` events (``gateway.websocket.session``) and the head bound's 431
(``gateway.edge.connections``, whose headers were never read) call ``told`` / ``log_rejected``
themselves. Nothing here runs for a request that was answered: its only cost is on the error
path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from fastmode.gateway.errors import APIError
from fastmode.gateway.values.key_ids import key_id

log = logging.getLogger("fastmode.requests")

MESSAGE_CHARS = 200


def _quoted(text: str) -> str:
    """``text`` as one JSON string: quotes, newlines and control characters escaped, so a line
    stays one line whatever a client put in its user agent."""
    return orjson.dumps(text).decode()


def log_rejected(where: str, status: int, error: APIError, user_agent: str | None) -> None:
    """The one INFO line of a 4xx (``where``: ``POST /v1/chat/completions``, ``ws
    response.create``)."""
    if not 400 <= status < 500 or not log.isEnabledFor(logging.INFO):
        return
    message = error.message
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS] + "…"
    log.info("rejected %d %s param=%s code=%s ua=%s message=%s", status, where,
             error.param or "-", error.code or "-",
             _quoted(user_agent) if user_agent is not None else "-", _quoted(message))


def owner_of(auth_enabled: bool, headers: Mapping[str, str]) -> str | None:
    """The key id a refused request's trace belongs to: the key it sent (``x-api-key`` or a
    bearer token). A key that is not one of the server's owns it too: only that same key
    could read it back, and that key would be valid, so with a refused key only the admin key
    sees it. Auth off: nobody (everyone sees it)."""
    if not auth_enabled:
        return None
    token = headers.get("x-api-key") or ""
    if not token:
        scheme, _, token = (headers.get("authorization") or "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
    return key_id(token) if token else None


def told(gateway: Any, headers: Mapping[str, str], where: str, request_id: str,
         protocol: str, transport: str, status: int, error: APIError,
         error_body: Mapping[str, Any], *, sent: Any = None, model: str = "",
         arrival: float | None = None) -> None:
    """Log a refused request and trace it (if traced). ``error_body`` is the error object as
    the client got it (its ``type`` is the protocol's)."""
    log_rejected(where, status, error, headers.get("user-agent"))
    if gateway is None:
        return
    shown = {"type": error_body.get("type", error.type), "code": error.code,
             "param": error.param, "message": error.message, "where": where}
    gateway.traces.rejected(headers, request_id, protocol, transport, status, shown,
                            owner=owner_of(gateway.auth.enabled, headers), sent=sent,
                            model=model, arrival=arrival)


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(scope["headers"])}


class Rejection(Response):
    """An error answer of a route (``Protocol.error_response``) that is told when it is sent.
    ``sent`` / ``arrival``: the raw body and when it was read, if the route read it."""

    protocol = ""
    error: APIError | None = None
    error_object: Mapping[str, Any] = {}
    request_id = ""
    sent: Any = None
    arrival: float | None = None

    def of(self, sent: Any, arrival: float | None = None) -> Rejection:
        """The body the client sent (bytes as read), for the trace."""
        self.sent, self.arrival = sent, arrival
        return self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = self.error
        if error is not None and scope.get("type") == "http":
            app = scope.get("app")
            state = getattr(app, "state", None)
            try:
                told(getattr(state, "gateway", None), _headers(scope),
                     f"{scope['method']} {scope['path']}", self.request_id, self.protocol,
                     "http", self.status_code, error, self.error_object, sent=self.sent,
                     arrival=self.arrival)
            except Exception:  # telling must never cost the client its answer
                log.exception("could not log or trace a refused request")
        await super().__call__(scope, receive, send)


def rejection(protocol: str, error: APIError, request_id: str, body: dict[str, Any],
              status: int, headers: dict[str, str]) -> Rejection:
    """The ``Rejection`` of ``error`` with its rendered ``body``."""
    out = Rejection(orjson.dumps(body), status, headers=headers, media_type="application/json")
    out.protocol, out.error, out.request_id = protocol, error, request_id
    inner = body.get("error")
    out.error_object = inner if isinstance(inner, dict) else {}
    return out
