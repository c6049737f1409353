"""What a client sent, as a trace keeps it (``x-fastmode-trace: body``, ``serve --trace-bodies``).

A traced request's body is kept as parsed JSON with its headers, redacted by the recorder's own
``Redactor`` (``gateway.observe.exchange_format``: the ``[record] redact`` patterns and
``redact_hook``, so a trace never shows what a cassette would not) and bounded, because the
ring keeps ``server.trace_keep`` of them and a coding agent's request carries its whole
conversation:

* every string is cut to ``server.trace_body_string_chars`` characters (the cut says how many
  were dropped);
* the whole capture stops near ``server.trace_body_max_bytes`` (its JSON size, counted as the
  walk goes): the list items and object members past it are replaced by one note;
* nesting deeper than ``MAX_DEPTH`` is replaced by a note (a rejected body may be the 1,000-deep
  one the limits refused).

Strings are redacted before they are cut, so a key that straddles the cut is never left half
shown; the walk before redaction keeps ``_MARGIN`` characters past the cut for that, so a
16 MB string is not run through the patterns whole. Headers that may carry a credential
(``gateway.cassette_config.secret_header``: ``authorization``, ``x-api-key``, cookies, any
name with key/token/secret/auth) are kept by name with the value ``[REDACTED]``.

All of it runs only for a request traced with bodies, once, when its trace is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from fastmode.gateway.cassette_config import REDACTED, secret_header
from fastmode.gateway.observe.exchange_format import Redactor

MAX_DEPTH = 32
_MARGIN = 256  # characters kept past the cut until redaction (longer than any key pattern)
_SCALAR = 6  # bytes counted for a number, a bool, a null and each separator


@dataclass(frozen=True, slots=True)
class BodyBounds:
    string_chars: int  # server.trace_body_string_chars
    max_bytes: int  # server.trace_body_max_bytes


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def _bounded(value: Any, keep: int, budget: _Budget, depth: int) -> Any:
    """``value`` within the budget and the depth, strings cut to ``keep`` characters."""
    if isinstance(value, str):
        budget.left -= min(len(value), keep) + 2
        return value if len(value) <= keep else value[:keep]
    if depth >= MAX_DEPTH and isinstance(value, (dict, list)):
        budget.left -= 24
        return f"[fastmode: nested deeper than {MAX_DEPTH}, not kept]"
    if isinstance(value, list):
        out: list[Any] = []
        for i, item in enumerate(value):
            if budget.left <= 0:
                out.append(f"[fastmode: {len(value) - i} more items not kept]")
                break
            out.append(_bounded(item, keep, budget, depth + 1))
        return out
    if isinstance(value, dict):
        obj: dict[str, Any] = {}
        for i, (k, v) in enumerate(value.items()):
            if budget.left <= 0:
                obj["fastmode_truncated"] = f"{len(value) - i} more members not kept"
                break
            budget.left -= min(len(k), keep) + 3
            obj[k[:keep]] = _bounded(v, keep, budget, depth + 1)
        return obj
    budget.left -= _SCALAR
    return value


def _cut(value: Any, chars: int) -> Any:
    """Strings of the (already bounded) ``value`` cut to ``chars``, saying by how much."""
    if isinstance(value, str):
        return value if len(value) <= chars else (
            f"{value[:chars]}…[fastmode: cut at {chars} characters]")
    if isinstance(value, list):
        return [_cut(v, chars) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v, chars) for k, v in value.items()}
    return value


def parsed(sent: Any) -> Any:
    """The body as JSON values: raw bytes or text parsed (a body that does not parse is kept as
    its text, which is what the client sent), a dict as it is."""
    if isinstance(sent, (bytes, bytearray, memoryview, str)):
        try:
            return orjson.loads(sent)
        except orjson.JSONDecodeError:
            return bytes(sent).decode("utf-8", "replace") if not isinstance(sent, str) else sent
    return sent


def capture(sent: Any, protocol: str, redactor: Redactor, bounds: BodyBounds) -> Any:
    """The body a trace keeps: parsed, bounded, redacted, cut (see the module doc)."""
    keep = bounds.string_chars + _MARGIN
    value = _bounded(parsed(sent), keep, _Budget(bounds.max_bytes), 0)
    if isinstance(value, dict):
        value = redactor.request(protocol, value)
    else:
        value = redactor.strings(value)
    return _cut(value, bounds.string_chars)


def headers(sent: Mapping[str, str], redactor: Redactor, chars: int) -> dict[str, str]:
    """The request's headers, a credential's value replaced (its name kept: that it was sent
    is what a user debugging a 401 needs to see)."""
    out: dict[str, str] = {}
    for name, value in sent.items():
        shown = REDACTED if secret_header(name) else redactor.strings(value[:chars + _MARGIN])
        out[name] = _cut(shown, chars)
    return out
