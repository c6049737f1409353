"""The Responses API's stored-response endpoints: ``GET`` and ``DELETE /v1/responses/{id}``,
``GET /v1/responses/{id}/input_items`` and ``POST /v1/responses/{id}/cancel``.

A background response (``gateway.endpoints.background``) is answered live by the process that runs it,
and from the shared state (past this process's memory) by the others; ``?stream=true`` replays
its events, and ``cancel`` stops it (only a background response can be cancelled).

They read what ``POST /v1/responses`` kept in the shared state (``gateway.state``): a response
with ``store`` not false keeps its response object and its input items (``gateway.stored.response_body``), so
any gateway process sharing the state answers. A response that was not stored (``store:
false``), was deleted, or never existed is a 404 in OpenAI's format, as the provider answers.
Input items are listed newest first by default (``order=asc`` for oldest first), ``limit``
(1-100, default 20) at a time, continued with ``after`` (an item id); the page says
``first_id``, ``last_id`` and ``has_more``, which the SDK's cursor pages follow.

With auth on, a stored response is its key's alone (``gateway.stored.ownership``): a request without a
valid key is a 401, another key's response is the 404 of an unknown id (its existence is not
revealed), and the admin key reads and deletes every key's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response, StreamingResponse

from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.pages import page
from fastmode.gateway.state import StoredResponse
from fastmode.gateway.stored.ownership import caller
from fastmode.gateway.stored.response_store import ResponseStore

ACTIVE = ("queued", "in_progress")  # a background response still running


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _error(error: APIError) -> Response:
    return Response(orjson.dumps(error.body()), error.status, headers=error.headers,
                    media_type="application/json")


def _not_found(rid: str) -> APIError:
    return APIError(404, f"Response with id '{rid}' not found.", param="response_id",
                    code="not_found")


def _store(request: Request) -> ResponseStore:
    """The stored responses as this request's caller sees them (401 without a valid key)."""
    gateway = request.app.state.gateway
    who = caller(gateway.auth, request.headers, admin=gateway.is_admin(request.headers))
    root: ResponseStore = request.app.state.responses
    return root.seen_by(who)


async def _stored(store: ResponseStore, rid: str, fresh: bool = False) -> dict[str, Any]:
    item: StoredResponse | None = await (store.reload(rid) if fresh else store.load(rid))
    body = item.body if item is not None else None
    if not isinstance(body, dict) or "response" not in body:
        raise _not_found(rid)
    return body


def _replay(run: Any, response: dict[str, Any], params: Mapping[str, str]) -> Response:
    """``?stream=true``: a background response's events after ``starting_after``, followed to
    its end, from the process that runs it (``gateway.endpoints.background``)."""
    if not response.get("background"):
        raise bad_request("stream: only a background response's events can be streamed.",
                          param="stream")
    if run is None:
        raise bad_request("stream: this response's events are no longer kept (or it runs on "
                          "another gateway process); retrieve it without stream.",
                          param="stream")
    try:
        after = int(params.get("starting_after", -1))
    except ValueError:
        raise bad_request("starting_after: must be an integer.", param="starting_after") from None
    return StreamingResponse(run.events_after(after), media_type="text/event-stream",
                             headers={"cache-control": "no-cache"})


def add_routes(app: FastAPI) -> None:
    for prefix in ("/v1", "/fast/v1"):

        @app.get(prefix + "/responses/{rid}")
        async def get_response(rid: str, request: Request) -> Response:
            try:
                store = _store(request)  # a 401 first
                response = (await _stored(store, rid))["response"]
                run = request.app.state.background.runs.get(rid)
                if request.query_params.get("stream") in ("true", "1"):
                    return _replay(run, response, request.query_params)
                if run is not None:
                    return _json(run.response())  # the live status (gateway.background)
                if response.get("status") in ACTIVE:  # running on another process
                    response = (await _stored(store, rid, fresh=True))["response"]
            except APIError as exc:
                return _error(exc)
            return _json(response)

        @app.post(prefix + "/responses/{rid}/cancel")
        async def cancel_response(rid: str, request: Request) -> Response:
            try:
                store = _store(request)
                response = (await _stored(store, rid, fresh=True))["response"]
                return _json(await request.app.state.background.cancel(rid, response))
            except APIError as exc:
                return _error(exc)

        @app.delete(prefix + "/responses/{rid}")
        async def delete_response(rid: str, request: Request) -> Response:
            try:
                if not await _store(request).delete(rid):
                    raise _not_found(rid)
            except APIError as exc:
                return _error(exc)
            return _json({"id": rid, "object": "response", "deleted": True})

        @app.get(prefix + "/responses/{rid}/input_items")
        async def list_input_items(rid: str, request: Request) -> Response:
            try:
                body = await _stored(_store(request), rid)
                return _json(page(list(body.get("input_items") or []), request.query_params, "desc"))
            except APIError as exc:
                return _error(exc)
