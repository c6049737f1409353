"""A request body as a JSON object, or the 400 that says why it is not one."""

from __future__ import annotations

from typing import Any

import orjson

from fastmode.gateway.errors import bad_request


def parse_json(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise bad_request("The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(
            f"We could not parse the JSON body of your request ({exc}). The API expects a "
            "JSON payload."
        ) from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body
