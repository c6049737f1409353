"""Anthropic's ``POST /v1/messages/count_tokens``: the prompt tokens a Messages request would
be billed for, without running it.

The body is a Messages request without ``max_tokens`` (model, messages, system, tools,
tool_choice, ...); the answer is ``{"input_tokens": N}`` with the count ``POST /v1/messages``
uses (``usage.input_tokens`` + cache reads + cache writes of the same request). Errors are in
Anthropic's format: a bad body is a 400 naming the field, an unknown model a 404, a missing key
(when auth is on) a 401.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from pydantic import Field
from starlette.responses import Response

from fastmode.gateway.errors import APIError
from fastmode.gateway.http.limits import check_request
from fastmode.gateway.http.offload import caller_of, counted, off_loop, parse_body
from fastmode.gateway.protocols.anthropic_messages import MessagesProtocol
from fastmode.gateway.protocols.anthropic_messages.schema import MessagesRequest
from fastmode.gateway.protocols.base import RequestContext, validate
from fastmode.gateway.values.ids import new_id


class CountTokensRequest(MessagesRequest):
    """The body of ``count_tokens``: a Messages request without ``max_tokens`` (for
    ``/openapi.json``; the route validates with ``MessagesRequest`` and a placeholder cap)."""

    max_tokens: int | None = Field(None, ge=1)  # type: ignore[assignment]


def _count(gateway: Any, protocol: MessagesProtocol, raw: bytes, headers: Any, fast: bool,
           store: Any) -> int:
    """Parse, check, validate and count (off the loop for a large body, ``gateway.http.offload``)."""
    body = parse_body(raw, gateway.config.limits)
    check_request("messages", body, gateway.config.limits, caller=caller_of(headers))
    body.setdefault("max_tokens", 1)  # not part of this endpoint's body
    req: MessagesRequest = validate(MessagesRequest, body)
    key = headers.get("x-api-key")
    gateway.auth.authenticate(f"Bearer {key}" if key else headers.get("authorization"))
    gateway.router.route(req.model)  # 404 for an unknown model
    ctx = RequestContext(headers, fast, store)
    turn = counted(gateway.spec.max_context_window, protocol.name, protocol.translate, req, ctx,
                   caller=caller_of(headers))
    return turn.prompt_tokens  # what POST /v1/messages counts


async def count_tokens(request: Request) -> Response:
    protocol = MessagesProtocol()
    request_id = new_id("req")
    try:
        raw = await request.body()
        tokens = await off_loop(len(raw), _count, request.app.state.gateway, protocol, raw,
                                request.headers, request.url.path.startswith("/fast/"),
                                request.app.state.responses)
    except APIError as exc:
        return protocol.error_response(exc, request_id)
    return Response(b'{"input_tokens":%d}' % tokens, 200, media_type="application/json",
                    headers=protocol.id_headers(request_id))


def add_routes(app: FastAPI, openapi_extra: dict[str, Any] | None = None) -> None:
    """``openapi_extra``: the request body as ``/openapi.json`` shows it (``gateway.app``)."""
    for prefix in ("/v1", "/fast/v1"):
        app.add_api_route(prefix + "/messages/count_tokens", count_tokens, methods=["POST"],
                          openapi_extra=openapi_extra)
