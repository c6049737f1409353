"""Anthropic's Message Batches: ``/v1/messages/batches`` (create, retrieve, list, cancel,
delete, results).

A batch is ``{"requests": [{"custom_id", "params": <a Messages request>}]}``; each is answered
as ``POST /v1/messages`` answers it and timed on the batch pool. ``processing_status`` is
``in_progress`` until the pool is done (``canceling`` briefly on a cancel), then ``ended``
with ``results_url``: JSONL, one ``{"custom_id", "result": {"type": "succeeded", "message"}}``
(or ``errored`` with the error, ``canceled``, ``expired``) per request. Errors are Anthropic's.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Path, Request
from starlette.responses import Response

from fastmode.gateway.batches.service import Batches, body_of
from fastmode.gateway.batches.store import CANCELED, DONE, ERRORED, EXPIRED, Batch
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.http.offload import parse_body
from fastmode.gateway.protocols import MESSAGES
from fastmode.gateway.stored.ownership import Caller, caller
from fastmode.gateway.values.ids import new_id

BATCH_ID = r"^msgbatch_[0-9a-f]{24}$"  # what create makes (/openapi.json says so)
MAX_CUSTOM_ID = 64  # Anthropic: custom_id is 1-64 characters of [a-zA-Z0-9_-]


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat().replace("+00:00", "Z")


def who(request: Request) -> Caller:
    gateway = request.app.state.gateway
    if gateway.is_admin(request.headers):
        return caller(gateway.auth, request.headers, admin=True)
    key = request.headers.get("x-api-key")
    headers = {"authorization": f"Bearer {key}"} if key else request.headers
    return caller(gateway.auth, headers)


def card(batch: Batch, base: str) -> dict[str, Any]:
    counts = batch.counts()
    status = "ended" if batch.ended else "canceling" if batch.cancelled_at else "in_progress"
    return {
        "id": batch.id, "type": "message_batch", "processing_status": status,
        "request_counts": {"processing": counts["processing"], "succeeded": counts[DONE],
                           "errored": counts[ERRORED], "canceled": counts[CANCELED],
                           "expired": counts[EXPIRED]},
        "ended_at": iso(batch.ended_at), "created_at": iso(batch.created_at),
        "expires_at": iso(batch.created_at + batch.window_s * batch.time_scale),
        "archived_at": None, "cancel_initiated_at": iso(batch.cancelled_at),
        "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if batch.ended
        else None,
    }


def publish(batches: Batches, batch: Batch) -> dict[str, Any]:
    lines = []
    for e in batch.entries:
        outcome = batch.outcome(e, batch.ended_at)
        result: dict[str, Any] = {"type": outcome}
        if outcome == DONE:
            result["message"] = body_of(e)[1]
        elif outcome == ERRORED:
            result["error"] = body_of(e)[1]
        lines.append({"custom_id": e.custom_id, "result": result})
    return {"jsonl": b"\n".join(orjson.dumps(x) for x in lines) + b"\n"}


def requests_of(body: Any, limit: int) -> list[tuple[str, Any, Any]]:
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        raise bad_request("requests: Field required (a list of {custom_id, params}).",
                          param="requests")
    items = body["requests"]
    if not items or len(items) > limit:
        raise bad_request(f"requests: between 1 and {limit} requests.", param="requests")
    out, seen = [], set()
    for i, item in enumerate(items):
        cid = item.get("custom_id") if isinstance(item, dict) else None
        if (not isinstance(cid, str) or not 0 < len(cid) <= MAX_CUSTOM_ID
                or not cid.replace("-", "").replace("_", "").isalnum() or cid in seen):
            raise bad_request(f"requests.{i}.custom_id: 1-{MAX_CUSTOM_ID} characters of "
                              "letters, digits, '-' and '_', unique in the batch.",
                              param=f"requests.{i}.custom_id")
        seen.add(cid)
        out.append((cid, MESSAGES, item.get("params")))
    return out


def add_routes(app: FastAPI, batches: Batches) -> None:
    batches.publishers["anthropic"] = publish

    def answer(fn: Any) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            try:
                response: Response = await fn(request, who(request),
                                              str(request.base_url).rstrip("/"))
                return response
            except APIError as exc:
                return MESSAGES.error_response(exc, new_id("req"))
        return route

    def get(request: Request, me: Caller) -> Batch:
        return batches.store.get(request.path_params["batch_id"], me, "anthropic")

    async def create(request: Request, me: Caller, base: str) -> Response:
        body = parse_body(await request.body(), batches.gateway.config.limits)
        lines = requests_of(body, batches.config.max_requests)
        batch = await batches.submit("anthropic", me.owner, "/v1/messages", lines, request.headers)
        return json_response(card(batch, base))

    async def retrieve(request: Request, me: Caller, base: str) -> Response:
        return json_response(card(get(request, me), base))

    async def listing(request: Request, me: Caller, base: str) -> Response:
        cards = [card(b, base) for b in batches.store.visible(me, "anthropic")]
        return json_response({"data": cards, "has_more": False,
                              "first_id": cards[0]["id"] if cards else None,
                              "last_id": cards[-1]["id"] if cards else None})

    async def cancel(request: Request, me: Caller, base: str) -> Response:
        batch = get(request, me)
        batches.store.cancel(batch)
        return json_response(card(batch, base))

    async def delete(request: Request, me: Caller, base: str) -> Response:
        batch = get(request, me)
        if not batch.ended:
            raise bad_request("A batch must have ended (or been canceled) to be deleted.")
        batches.store.delete(batch)
        return json_response({"id": batch.id, "type": "message_batch_deleted"})

    async def results(request: Request, me: Caller, base: str) -> Response:
        batch = get(request, me)
        if not batch.ended:
            raise bad_request("The batch is still in progress: results are available once "
                              "its processing_status is 'ended'.")
        return Response(batch.results["jsonl"], media_type="application/x-jsonl")

    cancelling = answer(cancel)

    async def cancel_route(request: Request,
                           batch_id: str = Path(pattern=BATCH_ID)) -> Response:
        return await cancelling(request)

    for prefix in ("/v1", "/fast/v1"):
        path = prefix + "/messages/batches"
        app.add_api_route(path, answer(create), methods=["POST"])
        app.add_api_route(path, answer(listing), methods=["GET"])
        app.add_api_route(path + "/{batch_id}", answer(retrieve), methods=["GET"])
        app.add_api_route(path + "/{batch_id}", answer(delete), methods=["DELETE"])
        app.add_api_route(path + "/{batch_id}/cancel", cancel_route, methods=["POST"])
        app.add_api_route(path + "/{batch_id}/results", answer(results), methods=["GET"])
