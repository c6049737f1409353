"""Which recorded exchange a request is: normalised bodies, the matchers, the nearest entry.

A request body is *normalised* by its protocol's own schema (the pydantic model every route
validates with, dumped with only the fields that were sent, by their wire names) and stripped
of what only says how to deliver the answer (``stream``; for the Responses API, which also runs
over the websocket, ``stream_options``): whether the answer is streamed is matched on its own,
so one streamed recording serves a Responses request over SSE and over the websocket alike.
A recorded request goes through the same normalisation when the cassette is loaded, so a body
edited by hand in a cassette matches as a client's would.

Matchers: ``body`` (the canonical JSON of the normalised body, minus ``[replay] ignore``),
``last_user`` (the text of the last user message), ``header`` (a request header's value).
"""

from __future__ import annotations

from typing import Any

import orjson

from fastmode.gateway.protocols import ENDPOINTS
from fastmode.gateway.protocols.base import Protocol

PROTOCOLS: dict[str, Protocol] = {p.name: p for p in ENDPOINTS.values()}
_DELIVERY = {"stream"}
_DELIVERY_RESPONSES = {"stream", "stream_options"}


def normalised(protocol: str, req: Any) -> dict[str, Any]:
    """A validated request (the protocol's schema model) as the body a cassette keeps."""
    body: dict[str, Any] = req.model_dump(mode="json", exclude_unset=True, by_alias=True)
    drop = _DELIVERY_RESPONSES if protocol == "responses" else _DELIVERY
    return {k: v for k, v in body.items() if k not in drop}


def validated(protocol: str, body: dict[str, Any]) -> dict[str, Any]:
    """A recorded request as a live one would be normalised (APIError if invalid)."""
    return normalised(protocol, PROTOCOLS[protocol].validate(body))


def without(value: Any, path: list[str]) -> Any:
    """``value`` without the field at a dotted ``path`` (``*`` is any key or list index; a
    number is a list index)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        if not rest:
            return {k: v for k, v in value.items() if not (head == "*" or k == head)}
        return {k: without(v, rest) if head in ("*", k) else v for k, v in value.items()}
    if isinstance(value, list):
        hit = (lambda i: True) if head == "*" else (lambda i: head.isdigit() and i == int(head))
        if not rest:
            return [v for i, v in enumerate(value) if not hit(i)]
        return [without(v, rest) if hit(i) else v for i, v in enumerate(value)]
    return value


def ignoring(body: dict[str, Any], ignore: list[str]) -> dict[str, Any]:
    for field in ignore:
        body = without(body, field.split("."))
    return body


def canonical(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def last_user(protocol: str, body: dict[str, Any]) -> str | None:
    """The text of the last user message (Completions: the prompt), or None."""
    if protocol == "completions":
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode()
    items = body.get("input" if protocol == "responses" else "messages")
    if isinstance(items, str):  # a Responses input given as text
        return items
    messages: list[Any] = items if isinstance(items, list) else []
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            return _text(m.get("content"))
    return None


def differences(a: Any, b: Any, path: str = "", limit: int = 50) -> list[tuple[str, Any, Any]]:
    """Where two JSON values differ: (path, value in ``a``, value in ``b``), at most ``limit``."""
    out: list[tuple[str, Any, Any]] = []

    def walk(x: Any, y: Any, at: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in list(x) + [k for k in y if k not in x]:
                walk(x.get(k, _ABSENT), y.get(k, _ABSENT), f"{at}.{k}" if at else k)
        elif isinstance(x, list) and isinstance(y, list):
            for i in range(max(len(x), len(y))):
                walk(x[i] if i < len(x) else _ABSENT, y[i] if i < len(y) else _ABSENT,
                     f"{at}[{i}]")
        elif x != y or type(x) is not type(y):
            out.append((at or "body", x, y))

    walk(a, b, path)
    return out


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT = _Absent()


def shown(value: Any, width: int = 60) -> str:
    """A value for an error message, shortened."""
    text = repr(value) if isinstance(value, _Absent) else orjson.dumps(value).decode()
    return text if len(text) <= width else text[: width - 1] + "…"
