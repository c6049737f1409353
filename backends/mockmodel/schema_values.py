"""Tool-call arguments for the mock model: JSON values generated to fit a JSON schema.

The mock model has to emit tool calls an agent can actually execute, so arguments are generated
*from* the tool's JSON schema rather than invented; ``schema_check`` validates them with the
``jsonschema`` library, so a generated value is held to the standard, not to this module's idea
of it.

Honoured keywords: ``type`` (also as a list), ``properties``, ``required``, ``enum``,
``const``, ``anyOf`` / ``oneOf`` (the first branch), ``allOf``, local ``$ref``
(``#/$defs/...``, ``#/definitions/...``), ``minimum`` / ``maximum`` / ``exclusiveMinimum`` /
``exclusiveMaximum``, ``minLength`` / ``maxLength``, ``items``, ``minItems`` / ``maxItems``,
``uniqueItems``, and string ``format`` for ``date``, ``date-time``, ``time``, ``email``,
``uri``/``url`` and ``uuid``. ``pattern`` and ``multipleOf`` are not generated for.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["generate_value", "resolve_local"]

_MAX_DEPTH = 6  # deeper (or recursive) schemas get minimal values instead of unbounded recursion

# Plausible strings keyed by words that often appear in property names.
_HINTS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("city", "location", "place"), ("Paris", "Tokyo", "Lisbon", "Toronto", "Nairobi", "Austin")),
    (("country",), ("France", "Japan", "Portugal", "Canada", "Kenya", "Chile")),
    (("email",), ("alex@example.com", "sam.lee@example.org", "ops@example.net")),
    (
        ("url", "uri", "link", "endpoint"),
        ("https://example.com/docs", "https://api.example.org/v1"),
    ),
    (("path", "file", "filename"), ("src/main.py", "README.md", "config/settings.toml", "app.js")),
    (("dir", "folder", "directory"), ("src", "tests", "docs", "build")),
    (("lang", "language"), ("python", "rust", "typescript", "go")),
    (("unit", "units"), ("celsius", "metric", "seconds", "tokens")),
    (("command", "cmd", "shell"), ("ls -la", "pytest -q", "git status", "make build")),
    (("query", "search", "question", "q"), ("latency budget", "batch scheduler", "kv cache size")),
    (("name", "title", "label"), ("nightly-report", "Alex Morgan", "build cache", "demo")),
    (("id", "key", "token", "ref"), ("a1b2c3", "req_7f3e", "item-42", "k9x2")),
    (("color", "colour"), ("blue", "green", "orange")),
    (("currency",), ("USD", "EUR", "JPY")),
    (("model",), ("gpt-5", "claude-opus-4-6", "llama-3.1-70b")),
    (("status", "state"), ("open", "closed", "pending")),
    (("tz", "timezone"), ("UTC", "Europe/Paris", "America/New_York")),
)
_GENERIC_WORDS = (
    "alpha", "batch", "cache", "decode", "engine", "request", "schedule", "stream", "token",
    "latency", "router", "replica", "summary", "update", "report", "sample",
)  # fmt: skip


# --------------------------------------------------------------------------- generation


def generate_value(
    schema: Mapping[str, Any], rng: random.Random, *, key: str = "", context: str = ""
) -> Any:
    """A JSON value that satisfies ``schema``.

    ``key`` (the property name) steers free strings towards plausible values; ``context`` (the
    user's message) lets places and queries echo what the user asked about, so a scripted agent
    test sees ``{"city":"Paris"}`` after asking about Paris.
    """
    return _Generator(schema, rng, context).value(schema, key, 0)


class _Generator:
    """Walks a schema; holds the root so local ``$ref`` pointers can be resolved."""

    def __init__(self, root: Mapping[str, Any], rng: random.Random, context: str = "") -> None:
        self.root = root
        self.rng = rng
        self.names = _proper_nouns(context)
        self.phrase = _key_phrase(context)

    def value(self, schema: Any, key: str, depth: int) -> Any:
        schema = resolve_local(self.root, schema)
        if not isinstance(schema, Mapping):
            return self.string({}, key)  # ``true`` / garbage: any JSON will do
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self.rng.choice(list(schema["enum"]))
        for branch_key in ("anyOf", "oneOf"):
            branches = schema.get(branch_key)
            if branches:
                return self.value(_merge_branch(schema, branches[0], branch_key), key, depth)
        if schema.get("allOf"):
            return self.value(_merge_all_of(self.root, schema), key, depth)
        kind = _pick_type(schema)
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, key, depth)
        if kind == "integer":
            return self.integer(schema, key)
        if kind == "number":
            return self.number(schema)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self.string(schema, key)

    def object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        """All required properties, and each optional one with probability 1/2."""
        props: Mapping[str, Any] = schema.get("properties") or {}
        required = [k for k in schema.get("required") or () if isinstance(k, str)]
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or (depth < _MAX_DEPTH and self.rng.random() < 0.5):
                out[name] = self.value(sub, name, depth + 1)
        for name in required:  # required but not described: any string will do
            if name not in out:
                out[name] = self.string({}, name)
        return out

    def array(self, schema: Mapping[str, Any], key: str, depth: int) -> list[Any]:
        lo = int(schema.get("minItems", 0))
        hi = int(schema.get("maxItems", max(lo, 3)))
        n = lo if depth >= _MAX_DEPTH else self.rng.randint(max(lo, min(1, hi)), max(lo, hi))
        items = schema.get("items", {})
        if isinstance(items, list):  # old tuple form: the first schema for every item
            items = items[0] if items else {}
        out: list[Any] = []
        for _ in range(n * 4 if schema.get("uniqueItems") else n):
            candidate = self.value(items, _singular(key), depth + 1)
            if not (schema.get("uniqueItems") and candidate in out):
                out.append(candidate)
            if len(out) == n:
                break
        return out

    def integer(self, schema: Mapping[str, Any], key: str) -> int:
        lo, hi = _bounds(schema, integer=True)
        if lo is None and hi is None:
            lo, hi = _default_int_range(key)
        elif lo is None and hi is not None:
            lo = 1 if hi >= 1 else hi - 100
        elif hi is None and lo is not None:
            hi = lo + 100
        assert lo is not None and hi is not None
        return self.rng.randint(int(lo), int(max(lo, hi)))  # lo > hi: unsatisfiable, give lo

    def number(self, schema: Mapping[str, Any]) -> float:
        lo, hi = _bounds(schema, integer=False)
        lo = 0.0 if lo is None else lo
        hi = (lo + 100.0) if hi is None else hi
        value = round(self.rng.uniform(lo, hi), 2)
        if not _number_ok(schema, value):  # rounding pushed it out: fall back to the midpoint
            value = (lo + hi) / 2
        return value

    def string(self, schema: Mapping[str, Any], key: str) -> str:
        text = _formatted(schema.get("format"), self.rng) or self.plausible_word(key)
        lo = int(schema.get("minLength", 0))
        hi = schema.get("maxLength")
        while len(text) < lo:  # pad with words, not noise, so long minimums still read well
            text += " " + self.rng.choice(_GENERIC_WORDS)
        if hi is not None and len(text) > int(hi):
            text = text[: int(hi)]
        return text

    def plausible_word(self, key: str) -> str:
        words = set(key.lower().replace("-", "_").split("_"))
        if self.names and words & _PLACE_KEYS:
            return self.rng.choice(self.names)
        if self.phrase and words & _QUERY_KEYS:
            return self.phrase
        for hints, values in _HINTS:
            if words.intersection(hints):
                return self.rng.choice(values)
        return self.rng.choice(_GENERIC_WORDS)


_PLACE_KEYS = frozenset({"city", "location", "place", "country", "destination", "origin"})
_QUERY_KEYS = frozenset({"query", "search", "question", "q", "prompt", "topic", "keywords"})
_STOP = frozenset(
    "a an and are about can could do does for from give how i in is it me my of on or please "
    "show tell that the this to what whats when where which who why will with would you your".split()
)


def _proper_nouns(text: str) -> list[str]:
    """Capitalised words not at the start of a sentence: likely names of places or things."""
    found = re.findall(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]{2,})\b", text.strip())
    return list(dict.fromkeys(w for w in found if w.lower() not in _STOP))


def _key_phrase(text: str) -> str:
    """The first few content words of the user's message, as a search query."""
    words = [w for w in re.findall(r"[A-Za-z0-9][\w'-]*", text) if w.lower() not in _STOP]
    return " ".join(words[:5])


def _pick_type(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _bounds(schema: Mapping[str, Any], *, integer: bool) -> tuple[float | None, float | None]:
    """Inclusive bounds from minimum/maximum and their exclusive forms."""
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    ex_lo = schema.get("exclusiveMinimum")
    ex_hi = schema.get("exclusiveMaximum")
    step = 1 if integer else 1e-6
    if isinstance(ex_lo, int | float) and not isinstance(ex_lo, bool):
        lo = max(lo, ex_lo + step) if lo is not None else ex_lo + step
    if isinstance(ex_hi, int | float) and not isinstance(ex_hi, bool):
        hi = min(hi, ex_hi - step) if hi is not None else ex_hi - step
    if integer:
        lo = math.ceil(lo) if lo is not None else None
        hi = math.floor(hi) if hi is not None else None
    return lo, hi


def _default_int_range(key: str) -> tuple[int, int]:
    words = set(key.lower().replace("-", "_").split("_"))
    if "year" in words:
        return 2000, 2030
    if words & {"limit", "count", "num", "top", "max", "size", "n", "k", "results", "page"}:
        return 1, 20
    return 1, 100


def _formatted(fmt: Any, rng: random.Random) -> str | None:
    """A value for the common string formats (None: not a format we fake)."""
    y, mo, d = rng.randint(2020, 2027), rng.randint(1, 12), rng.randint(1, 28)
    h, mi = rng.randint(0, 23), rng.choice((0, 15, 30, 45))
    if fmt == "date":
        return f"{y:04d}-{mo:02d}-{d:02d}"
    if fmt == "date-time":
        return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:00Z"
    if fmt == "time":
        return f"{h:02d}:{mi:02d}:00"
    if fmt == "email":
        return f"{rng.choice(('alex', 'sam', 'kim', 'ops'))}@example.com"
    if fmt in ("uri", "url", "uri-reference"):
        return f"https://example.com/{rng.choice(_GENERIC_WORDS)}"
    if fmt == "uuid":
        h32 = f"{rng.getrandbits(128):032x}"
        return f"{h32[:8]}-{h32[8:12]}-4{h32[13:16]}-a{h32[17:20]}-{h32[20:32]}"
    return None


def _singular(key: str) -> str:
    return key[:-1] if key.endswith("s") and len(key) > 3 else key


def _merge_branch(parent: Mapping[str, Any], branch: Any, used: str) -> Mapping[str, Any]:
    """A branch of anyOf/oneOf plus the keywords written next to the anyOf/oneOf itself."""
    rest = {k: v for k, v in parent.items() if k != used}
    return {**rest, **branch} if isinstance(branch, Mapping) else rest


def _merge_all_of(root: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Shallow merge of allOf parts; properties and required lists are unioned."""
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema.get("allOf") or ():
        part = resolve_local(root, part)
        if not isinstance(part, Mapping):
            continue
        for k, v in part.items():
            if k == "properties":
                merged["properties"] = {**merged.get("properties", {}), **v}
            elif k == "required":
                merged["required"] = list(dict.fromkeys([*merged.get("required", []), *v]))
            else:
                merged.setdefault(k, v)
    return merged


def resolve_local(root: Mapping[str, Any], schema: Any) -> Any:
    """Follow local ``$ref`` pointers (a few hops at most, to survive cycles)."""
    for _ in range(8):
        if not (isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str)):
            return schema
        ref: str = schema["$ref"]
        target: Any = root
        for part in ref.lstrip("#").strip("/").split("/") if ref.startswith("#") else ["?"]:
            target = target.get(part) if isinstance(target, Mapping) and part else target
        schema = target if isinstance(target, Mapping) else {}
    return {}


def _number_ok(schema: Mapping[str, Any], value: float) -> bool:
    checks = (
        ("minimum", lambda b: value >= b),
        ("maximum", lambda b: value <= b),
        ("exclusiveMinimum", lambda b: value > b),
        ("exclusiveMaximum", lambda b: value < b),
    )
    for keyword, ok in checks:
        bound = schema.get(keyword)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and not ok(bound):
            return False
    return True
