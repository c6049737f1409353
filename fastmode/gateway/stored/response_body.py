"""What a stored response keeps: the response object as ``POST /v1/responses`` answered it,
and the request's input items as ``GET /v1/responses/{id}/input_items`` lists them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _text_parts(content: Any, kind: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": kind, "text": content}]
    if isinstance(content, list):
        return [dict(p) for p in content if isinstance(p, Mapping)]
    return []


def input_items(rid: str, items: str | Sequence[Any]) -> list[dict[str, Any]]:
    """A request's ``input`` as the items ``input_items`` lists (each with an id and status)."""
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    suffix = rid.removeprefix("resp_")
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(items):
        if not isinstance(raw, Mapping):
            continue
        item = dict(raw)
        kind = item.get("type", "message")
        if kind == "message" or ("role" in item and "type" not in item):
            role = item.get("role", "user")
            part = "output_text" if role == "assistant" else "input_text"
            item = {"type": "message", "role": role, "status": "completed",
                    "content": _text_parts(item.get("content"), part)}
            prefix = "msg"
        elif kind == "function_call_output":
            prefix = "fco"
        elif kind == "function_call":
            prefix = "fc"
        else:
            prefix = "item"
        item.setdefault("status", "completed")
        item["id"] = item.get("id") or f"{prefix}_{suffix}_{i}"
        out.append(item)
    return out


def stored_body(response: dict[str, Any], req: Any) -> dict[str, Any]:
    """What a stored response keeps for these endpoints: the response object as the POST
    answered it, and the request's input items."""
    return {"response": response,
            "input_items": input_items(response["id"], req.input)}
