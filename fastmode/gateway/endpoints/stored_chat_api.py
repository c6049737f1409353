"""The stored Chat Completions endpoints, in OpenAI's shapes (``gateway.stored.stored_chat``):

* ``GET /v1/chat/completions/{id}``: the completion as created (with its ``metadata``);
* ``POST /v1/chat/completions/{id}`` with ``{"metadata": {...}}``: replaces the metadata;
* ``DELETE /v1/chat/completions/{id}``: ``{"object": "chat.completion.deleted", ...}``;
* ``GET /v1/chat/completions``: the caller's completions, oldest first (``order=desc`` for
  newest), ``limit`` (1-100, default 20) and ``after``, filtered by ``model`` and
  ``metadata[KEY]=VALUE``;
* ``GET /v1/chat/completions/{id}/messages``: the request's messages, paged the same way.

Only completions created with ``store: true`` are kept. A request without a valid key (auth on)
is a 401; another key's completion, a deleted one or an unknown id a 404, in OpenAI's format.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.stored.ownership import caller
from fastmode.gateway.stored.stored_chat import StoredChats, check_metadata


def _json(body: Any) -> Response:
    return Response(orjson.dumps(body), 200, media_type="application/json")


def _error(error: APIError) -> Response:
    return Response(orjson.dumps(error.body()), error.status, headers=error.headers,
                    media_type="application/json")


def _chats(request: Request) -> StoredChats:
    """The stored completions as this request's caller sees them (401 without a valid key)."""
    gateway = request.app.state.gateway
    who = caller(gateway.auth, request.headers, admin=gateway.is_admin(request.headers))
    return StoredChats(gateway.state, who)


async def _metadata(request: Request) -> dict[str, str]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise bad_request("We could not parse the JSON body of your request.") from None
    if not isinstance(body, dict) or "metadata" not in body:
        raise bad_request("Missing required parameter: 'metadata'.", param="metadata",
                          code="missing_required_parameter")
    return check_metadata(body["metadata"])


# the update's body, for /openapi.json (the route reads the raw body itself: a bad one is
# OpenAI's 400, not FastAPI's 422)
UPDATE_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {
        "type": "object", "required": ["metadata"],
        "properties": {"metadata": {"type": ["object", "null"], "maxProperties": 16,
                                    "additionalProperties": {"type": "string",
                                                             "maxLength": 512}}}}}}}}


def add_routes(app: FastAPI) -> None:
    for prefix in ("/v1", "/fast/v1"):

        @app.get(prefix + "/chat/completions")
        async def list_completions(request: Request) -> Response:
            try:
                return _json(await _chats(request).list(request.query_params))
            except APIError as exc:
                return _error(exc)

        @app.get(prefix + "/chat/completions/{cid}")
        async def get_completion(cid: str, request: Request) -> Response:
            try:
                return _json(await _chats(request).get(cid))
            except APIError as exc:
                return _error(exc)

        @app.post(prefix + "/chat/completions/{cid}", openapi_extra=UPDATE_BODY)
        async def update_completion(cid: str, request: Request) -> Response:
            try:
                chats = _chats(request)  # a 401 first
                return _json(await chats.update(cid, await _metadata(request)))
            except APIError as exc:
                return _error(exc)

        @app.delete(prefix + "/chat/completions/{cid}")
        async def delete_completion(cid: str, request: Request) -> Response:
            try:
                await _chats(request).delete(cid)
            except APIError as exc:
                return _error(exc)
            return _json({"id": cid, "object": "chat.completion.deleted", "deleted": True})

        @app.get(prefix + "/chat/completions/{cid}/messages")
        async def list_messages(cid: str, request: Request) -> Response:
            try:
                return _json(await _chats(request).messages(cid, request.query_params))
            except APIError as exc:
                return _error(exc)
