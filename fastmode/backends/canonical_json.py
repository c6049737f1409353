"""Canonical JSON text: what ``json.dumps(sort_keys=True, separators=(",", ":"), default=str)``
writes, made by orjson wherever orjson writes the same bytes (~10x faster).

Counts and hashes are taken of this text (a tool definition's prompt tokens, a seeded request's
digest), so it must not change with the encoder. For any value parsed from JSON, orjson's output
is ``json``'s except floats under 1e-4 or with a negative exponent (``json`` writes ``1e-05``,
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
# orjson's floats that json writes otherwise: under 1e-4 ("0.00001" for json's "1e-05") and
# negative exponents of one digit ("1e-7" for "1e-07"); literal searches, each at memchr speed
# (a pattern led by a character class scans ~20x slower)
_NEGATIVE_EXPONENT = re.compile(rb"e-\d")


def _as_json_writes(blob: bytes, ascii_only: bool) -> bool:
    if b"0.0000" in blob or _NEGATIVE_EXPONENT.search(blob) is not None:
        return False
    return not ascii_only or (blob.isascii() and b"\x7f" not in blob)


def canonical(value: Any) -> bytes:
    """``value`` as ``json.dumps`` with sorted keys, no spaces and ``default=str`` writes it
    (ASCII: other characters escaped), as bytes."""
    blob = _fast(value)
    if blob is not None and _as_json_writes(blob, True):
        return blob
    return _ASCII.encode(value).encode()


def canonical_text(value: Any) -> str:
    """The same with ``ensure_ascii=False`` (other characters as they are), as text."""
    blob = _fast(value)
    if blob is not None and _as_json_writes(blob, False):
        return blob.decode()
    return _UNICODE.encode(value)


def _fast(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value, default=str, option=_ORJSON)
    except TypeError:  # (orjson.JSONEncodeError is one)
        return None
