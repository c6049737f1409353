"""OpenAI's Batch API: ``/v1/files`` and ``/v1/batches`` (create, retrieve, cancel, list).

The input file is JSONL, one request a line: ``{"custom_id", "method": "POST", "url":
endpoint, "body"}``; ``endpoint`` is ``/v1/chat/completions``, ``/v1/completions`` or
``/v1/responses`` and ``completion_window`` ``24h``. A file that breaks those rules fails the
batch at validation (``status: failed``, ``errors`` naming the line), as OpenAI's does. The
status moves ``in_progress`` -> ``completed`` (``expired`` past the window, ``cancelling`` ->
``cancelled`` on a cancel) as the modeled pool finishes the requests, ``request_counts``
following; the output file (and an error file for the lines the endpoint refused) appears at
the end, one line per request: ``{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error"}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Path, Request
from starlette.responses import Response

from fastmode.gateway.batches.files import listing, upload
from fastmode.gateway.batches.runner import OPENAI_ENDPOINTS
from fastmode.gateway.batches.service import Batches, body_of
from fastmode.gateway.batches.store import CANCELED, DONE, ERRORED, EXPIRED, Batch
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.http.offload import parse_body
from fastmode.gateway.money import cost
from fastmode.gateway.protocols import CHAT
from fastmode.gateway.stored.ownership import Caller, caller
from fastmode.gateway.values.ids import new_id

BATCH_ID = r"^batch_[0-9a-f]{24}$"  # what create makes (/openapi.json says so: fuzzers too)


def who(request: Request) -> Caller:
    gateway = request.app.state.gateway
    return caller(gateway.auth, request.headers, admin=gateway.is_admin(request.headers))


def card(batch: Batch) -> dict[str, Any]:
    counts = batch.counts()
    done = batch.ended
    status = ("failed" if batch.errors else "cancelled" if batch.cancelled_at and done
              else "expired" if done and counts[EXPIRED] else "completed" if done
              else "in_progress")
    created = int(batch.created_at)
    ended = int(batch.ended_at) if batch.ended_at else None
    jobs = [e.prepared.job for e in batch.entries
            if e.prepared is not None and batch.outcome(e) == DONE]
    return {
        "id": batch.id, "object": "batch", "endpoint": batch.endpoint,
        "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
        "input_file_id": batch.input_file_id, "completion_window": "24h", "status": status,
        "output_file_id": batch.results.get("output_file_id"),
        "error_file_id": batch.results.get("error_file_id"),
        "created_at": created, "in_progress_at": None if batch.errors else created,
        "expires_at": created + int(batch.window_s * batch.time_scale),
        "finalizing_at": ended if status == "completed" else None,
        "completed_at": ended if status == "completed" else None,
        "failed_at": ended if status == "failed" else None,
        "expired_at": ended if status == "expired" else None,
        "cancelling_at": int(batch.cancelled_at) if batch.cancelled_at else None,
        "cancelled_at": ended if status == "cancelled" else None,
        "request_counts": {"total": len(batch.entries), "completed": counts[DONE],
                           "failed": counts[ERRORED] + counts[EXPIRED]
                           + (counts[CANCELED] if done else 0)},
        "metadata": batch.metadata,
        "usage": {"input_tokens": sum(j.prompt_tokens for j in jobs),
                  "output_tokens": sum(j.gen.output_tokens for j in jobs),
                  "total_tokens": sum(j.prompt_tokens + j.gen.output_tokens for j in jobs),
                  "cost_usd": cost(sum(j.cost_usd for j in jobs))},
    }


def publish(batches: Batches, batch: Batch) -> dict[str, Any]:
    """The output and error files of a finished batch."""
    if batch.errors:
        return {}
    out: list[dict[str, Any]] = []
    err: list[dict[str, Any]] = []
    for e in batch.entries:
        outcome = batch.outcome(e, batch.ended_at)
        line: dict[str, Any] = {"id": new_id("batch_req"), "custom_id": e.custom_id,
                                "response": None, "error": None}
        if outcome in (DONE, ERRORED):
            status, body = body_of(e)
            rid = e.prepared.job.id if e.prepared is not None else new_id("req")
            line["response"] = {"status_code": status, "request_id": rid, "body": body}
            (out if outcome == DONE else err).append(line)
        else:
            code = "batch_expired" if outcome == EXPIRED else "batch_cancelled"
            line["error"] = {"code": code, "message": f"This request was {outcome} before "
                             "the batch pool ran it."}
            err.append(line)
    files = {}
    for key, lines in (("output_file_id", out), ("error_file_id", err)):
        if lines:
            data = b"\n".join(orjson.dumps(x) for x in lines) + b"\n"
            files[key] = batches.files.add(f"{batch.id}_{key[:-8]}.jsonl", "batch_output",
                                           data, batch.owner).id
    return files


def parse_lines(data: bytes, endpoint: str, limit: int) -> tuple[list[Any], list[Any]]:
    """(lines as (custom_id, protocol, body), validation errors) of an input file."""
    lines: list[Any] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    rows = [r for r in data.splitlines() if r.strip()]
    if not rows:
        errors.append({"code": "empty_file", "message": "The input file has no requests.",
                       "param": None, "line": None})
    if len(rows) > limit:
        errors.append({"code": "too_many_requests", "message": f"{len(rows)} requests; at "
                       f"most {limit} per batch.", "param": None, "line": None})
        return [], errors
    for n, row in enumerate(rows, 1):
        try:
            item = orjson.loads(row)
        except orjson.JSONDecodeError:
            item = None
        problem = None
        if not isinstance(item, dict):
            problem = ("invalid_json_line", "This line is not a JSON object.")
        elif not isinstance(item.get("custom_id"), str) or item["custom_id"] in seen:
            problem = ("invalid_custom_id", "custom_id must be a string unique in the file.")
        elif item.get("method") != "POST":
            problem = ("invalid_method", "method must be POST.")
        elif item.get("url") != endpoint:
            problem = ("mismatched_endpoint", f"url must be the batch's endpoint {endpoint}.")
        if problem is not None:
            errors.append({"code": problem[0], "message": problem[1], "param": None,
                           "line": n})
            continue
        assert isinstance(item, dict)
        seen.add(item["custom_id"])
        lines.append((item["custom_id"], OPENAI_ENDPOINTS[endpoint], item.get("body")))
    return lines, errors


def add_routes(app: FastAPI, batches: Batches) -> None:
    batches.publishers["openai"] = publish

    def answer(fn: Any) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            try:
                response: Response = await fn(request, who(request))
                return response
            except APIError as exc:
                return CHAT.error_response(exc, new_id("req"))
        return route

    async def create_file(request: Request, me: Caller) -> Response:
        return await upload(request, batches.files, me, batches.config.max_file_bytes,
                            batches.config.max_stored_bytes)

    async def list_files(request: Request, me: Caller) -> Response:
        return listing(batches.files, me)

    async def get_file(request: Request, me: Caller) -> Response:
        return json_response(batches.files.get(request.path_params["file_id"], me).card())

    async def file_content(request: Request, me: Caller) -> Response:
        item = batches.files.get(request.path_params["file_id"], me)
        return Response(item.data, media_type="application/octet-stream")

    async def delete_file(request: Request, me: Caller) -> Response:
        batches.files.delete(request.path_params["file_id"], me)
        return json_response({"id": request.path_params["file_id"], "object": "file",
                              "deleted": True})

    async def create_batch(request: Request, me: Caller) -> Response:
        body = parse_body(await request.body(), batches.gateway.config.limits)
        if not isinstance(body, dict):
            raise bad_request("The body must be a JSON object.")
        endpoint = body.get("endpoint")
        if endpoint not in OPENAI_ENDPOINTS:
            raise bad_request(f"Invalid value for 'endpoint': {endpoint!r}; supported: "
                              f"{', '.join(OPENAI_ENDPOINTS)}.", param="endpoint")
        if body.get("completion_window") != "24h":
            raise bad_request("Invalid value for 'completion_window': only '24h' is "
                              "supported.", param="completion_window")
        if not isinstance(body.get("input_file_id"), str):
            raise bad_request("Missing required parameter: 'input_file_id'.",
                              param="input_file_id")
        source = batches.files.get(body["input_file_id"], me)
        lines, errors = parse_lines(source.data, endpoint, batches.config.max_requests)
        batch = await batches.submit("openai", me.owner, endpoint, [] if errors else lines,
                               request.headers, metadata=body.get("metadata"),
                               input_file_id=source.id, errors=errors)
        return json_response(card(batch))

    async def get_batch(request: Request, me: Caller) -> Response:
        return json_response(card(batches.store.get(request.path_params["batch_id"], me,
                                                    "openai")))

    async def cancel_batch(request: Request, me: Caller) -> Response:
        batch = batches.store.get(request.path_params["batch_id"], me, "openai")
        batches.store.cancel(batch)
        return json_response(card(batch))

    async def list_batches(request: Request, me: Caller) -> Response:
        cards = [card(b) for b in batches.store.visible(me, "openai")]
        return json_response({"object": "list", "data": cards, "has_more": False,
                              "first_id": cards[0]["id"] if cards else None,
                              "last_id": cards[-1]["id"] if cards else None})

    cancel = answer(cancel_batch)

    async def cancel_route(request: Request,
                           batch_id: str = Path(pattern=BATCH_ID)) -> Response:
        return await cancel(request)

    for prefix in ("/v1", "/fast/v1"):
        app.add_api_route(prefix + "/files", answer(create_file), methods=["POST"])
        app.add_api_route(prefix + "/files", answer(list_files), methods=["GET"])
        app.add_api_route(prefix + "/files/{file_id}", answer(get_file), methods=["GET"])
        app.add_api_route(prefix + "/files/{file_id}", answer(delete_file),
                          methods=["DELETE"])
        app.add_api_route(prefix + "/files/{file_id}/content", answer(file_content),
                          methods=["GET"])
        app.add_api_route(prefix + "/batches", answer(create_batch), methods=["POST"])
        app.add_api_route(prefix + "/batches", answer(list_batches), methods=["GET"])
        app.add_api_route(prefix + "/batches/{batch_id}", answer(get_batch), methods=["GET"])
        app.add_api_route(prefix + "/batches/{batch_id}/cancel", cancel_route,
                          methods=["POST"])
