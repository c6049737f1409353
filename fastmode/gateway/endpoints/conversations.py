"""The Conversations API (``/v1/conversations`` and the Responses ``conversation`` parameter):
refused clearly, never ignored.

A client that sends ``conversation`` expects the server to keep the history; silently
answering without it would make an agent lose its context without a word. fastmode keeps a
conversation through ``previous_response_id`` (stored responses, owned by the key:
``gateway.stored.response_store``) or a client-held history, and answers every Conversations call,
and a Responses request naming a conversation (``ResponsesRequest._no_conversations``, on
HTTP and the websocket alike), with a 400 in OpenAI's format that says so.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import Response

from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols import CHAT
from fastmode.gateway.protocols.openai_responses.schema import CONVERSATIONS_REFUSED
from fastmode.gateway.values.ids import new_id

METHODS = ["GET", "POST", "DELETE"]


async def refuse(request: Request) -> Response:
    message = CONVERSATIONS_REFUSED[0].upper() + CONVERSATIONS_REFUSED[1:] + "."
    return CHAT.error_response(APIError(400, message, code="unsupported_feature"),
                               new_id("req"))


def add_routes(app: FastAPI) -> None:
    # refusals, not an API: kept out of /openapi.json (and so out of schema-driven fuzzing)
    for prefix in ("/v1", "/fast/v1"):
        app.add_api_route(prefix + "/conversations", refuse, methods=METHODS,
                          include_in_schema=False)
        app.add_api_route(prefix + "/conversations/{rest:path}", refuse, methods=METHODS,
                          include_in_schema=False)
