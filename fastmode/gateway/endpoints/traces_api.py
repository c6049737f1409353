"""``GET /v1/fastmode/traces``: the server's ground truth per request, as JSONL.

``?since=N`` returns the finished traces after the one whose ``seq`` is N (0, the default: all
that the ring still holds), oldest first, so a tool polls with the last ``seq`` it saw; ``limit``
bounds one answer. Each trace belongs to the key that made the request (``gateway.stored.ownership``):
another key does not see it, the admin key sees all, a request without a valid key is a 401.
"""

from __future__ import annotations

import itertools

import orjson
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.stored.ownership import caller


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"Invalid value for '{name}': expected an integer.",
                          param=name, code="invalid_value") from None
    if value < 0:
        raise bad_request(f"Invalid value for '{name}': expected 0 or more.",
                          param=name, code="invalid_value")
    return value


def add_routes(app: FastAPI) -> None:
    for prefix in ("/v1", "/fast/v1"):

        @app.get(prefix + "/fastmode/traces")
        async def traces(request: Request) -> Response:
            gateway = request.app.state.gateway
            try:
                who = caller(gateway.auth, request.headers,
                             admin=gateway.is_admin(request.headers))
                since = _int(request, "since", 0)
                limit = _int(request, "limit", 100000)
            except APIError as exc:
                return Response(orjson.dumps(exc.body()), exc.status, headers=exc.headers,
                                media_type="application/json")
            found = itertools.islice(gateway.traces.since(since, who), limit)
            body = b"".join(orjson.dumps(t.record()) + b"\n" for t in found)
            return Response(body, 200, media_type="application/x-ndjson")
