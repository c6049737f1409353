"""Canonical JSON text: what ``json.dumps(sort_keys=True, separators=(",", ":"), default=str)``
writes, made by orjson wherever orjson writes the same bytes (~10x faster).

Counts and hashes are taken of this text (a tool definition's prompt tokens, a seeded request's
digest), so it must not change with the encoder. For any value parsed from JSON, orjson's output
is ``json``'s except floats written with an exponent or under 1e-4 (``json`` writes ``1e-05``,
orjson ``0.00001``), what orjson refuses (integers past 64 bits, keys that are not strings, lone
surrogates) and, with ``ensure_ascii``, non-ASCII text and DEL (``json`` escapes them): those
take ``json``. (Values JSON cannot carry, NaN or a plain ``Enum``, would come out otherwise: no
request body has them, ``orjson.loads`` refuses NaN.)
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_ORJSON = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_ASCII = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
_UNICODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str,
                            ensure_ascii=False)
_FLOAT_FORMS = re.compile(rb"\d[eE][-+]?\d|0\.0000")  # an exponent, or a float under 1e-4
_ASCII_FORMS = re.compile(rb"[\x7f]|\d[eE][-+]?\d|0\.0000")


def canonical(value: Any) -> bytes:
    """``value`` as ``json.dumps`` with sorted keys, no spaces and ``default=str`` writes it
    (ASCII: other characters escaped), as bytes."""
    blob = _fast(value)
    if blob is not None and blob.isascii() and _ASCII_FORMS.search(blob) is None:
        return blob
    return _ASCII.encode(value).encode()


def canonical_text(value: Any) -> str:
    """The same with ``ensure_ascii=False`` (other characters as they are), as text."""
    blob = _fast(value)
    if blob is not None and _FLOAT_FORMS.search(blob) is None:
        return blob.decode()
    return _UNICODE.encode(value)


def _fast(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value, default=str, option=_ORJSON)
    except TypeError:  # (orjson.JSONEncodeError is one)
        return None
