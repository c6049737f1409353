"""Anthropic's ``POST /v1/messages/count_tokens``: the prompt tokens a Messages request would
be billed for, without running it.

The body is a Messages request without ``max_tokens`` (model, messages, system, tools,
tool_choice, ...); the answer is ``{"input_tokens": N}`` with the count ``POST /v1/messages``
uses (``usage.input_tokens`` + cache reads + cache writes of the same request). Errors are in
Anthropic's format: a bad body is a 400 naming the field, an unknown model a 404, a missing key
(when auth is on) a 401.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import Response

from ...errors import APIError
from ...ids import new_id
from ...limits import check_request
from ..base import RequestContext, parse_json, validate
from . import MessagesProtocol
from .schema import MessagesRequest


async def count_tokens(request: Request) -> Response:
    protocol = MessagesProtocol()
    request_id = new_id("req")
    gateway = request.app.state.gateway
    try:
        body = parse_json(await request.body())
        check_request("messages", body, gateway.config.limits)
        body.setdefault("max_tokens", 1)  # not part of this endpoint's body
        req: MessagesRequest = validate(MessagesRequest, body)
        key = request.headers.get("x-api-key")
        gateway.auth.authenticate(f"Bearer {key}" if key else request.headers.get(
            "authorization"))
        gateway.router.route(req.model)  # 404 for an unknown model
        ctx = RequestContext(request.headers, request.url.path.startswith("/fast/"),
                             request.app.state.responses)
        tokens = protocol.translate(req, ctx).prompt_tokens  # what POST /v1/messages counts
    except APIError as exc:
        return protocol.error_response(exc, request_id)
    return Response(b'{"input_tokens":%d}' % tokens, 200, media_type="application/json",
                    headers=protocol.id_headers(request_id))


def add_routes(app: FastAPI) -> None:
    for prefix in ("/v1", "/fast/v1"):
        app.add_api_route(prefix + "/messages/count_tokens", count_tokens, methods=["POST"])
