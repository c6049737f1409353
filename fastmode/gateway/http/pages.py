"""OpenAI's cursor pages (``order``, ``limit``, ``after``; ``first_id``, ``last_id``,
``has_more``): one implementation for every list the gateway serves (a stored response's input
items, stored chat completions and their messages)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastmode.gateway.errors import bad_request

MAX_LIMIT = 100
DEFAULT_LIMIT = 20


def page(items: list[dict[str, Any]], params: Mapping[str, str],
         default_order: str = "asc") -> dict[str, Any]:
    """OpenAI's cursor page of ``items`` (oldest first): ``order``, ``limit`` (1-100,
    default 20), ``after`` (an id on the previous page)."""
    order = params.get("order", default_order)
    if order not in ("asc", "desc"):
        raise bad_request("order: must be 'asc' or 'desc'.", param="order")
    try:
        limit = int(params.get("limit", DEFAULT_LIMIT))
    except ValueError:
        raise bad_request("limit: must be an integer.", param="limit") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise bad_request(f"limit: must be between 1 and {MAX_LIMIT}.", param="limit")
    ordered = items if order == "asc" else items[::-1]
    start = 0
    after = params.get("after")
    if after:
        ids = [it["id"] for it in ordered]
        if after not in ids:
            raise bad_request(f"after: no item with id '{after}'.", param="after")
        start = ids.index(after) + 1
    chunk = ordered[start:start + limit]
    return {"object": "list", "data": chunk,
            "first_id": chunk[0]["id"] if chunk else None,
            "last_id": chunk[-1]["id"] if chunk else None,
            "has_more": start + limit < len(ordered)}
