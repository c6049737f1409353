"""A JSON answer (orjson-encoded) for the gateway's plain routes: usage, health, admin,
models, the dashboard's feed. Its own module so that those routes need not import the turn
pipeline (``gateway.edge.turn_http``)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")
