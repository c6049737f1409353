"""Which JSON schemas a structured output may ask for, checked before any work.

OpenAI documents the subset its structured outputs support, and answers a schema outside it
with a 400 that names the keyword and where it is (``In context=('properties', 'zip'),
'patternProperties' is not permitted.``). fastmode checks the same subset, so a schema that
works here works there, and the generator (``schema_values``) never meets a keyword it cannot
honour:

* **strict** (``strict: true``: Chat ``json_schema``, Responses ``text.format``, strict
  function tools): the root is an object; every object says ``additionalProperties: false``
  and lists every property in ``required``; keywords are ``type``, ``properties``,
  ``required``, ``additionalProperties``, ``items``, ``enum``, ``const``, ``anyOf``, ``$ref``,
  ``$defs`` / ``definitions``, string ``pattern`` / ``format`` / ``minLength`` /
  ``maxLength``, numeric ``minimum`` / ``maximum`` / ``exclusiveMinimum`` /
  ``exclusiveMaximum`` / ``multipleOf``, array ``minItems`` / ``maxItems``, plus annotations
  (``title``, ``description``, ``default``, ``examples``, ...); ``format`` is one of
  date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid;
* **not strict**: the same keywords and also ``allOf``, ``oneOf``, ``uniqueItems`` and the URI
  formats, with objects free to leave properties optional or open.

Both bound what a schema may ask for (OpenAI's published limits: 10 levels of nesting, 5,000
properties, 1,000 enum values; and fastmode's: ``minItems`` and ``minLength``), so a schema
cannot make generation slow.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import jsonschema_rs
import orjson

from fastmode.backends.mockmodel.schema_strings import FORMATS

__all__ = ["SchemaRejected", "check_schema"]

ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
    "writeOnly", "$schema", "$id", "$anchor", "nullable",
})  # fmt: skip
STRICT_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "anyOf", "$ref", "$defs", "definitions", "pattern", "format", "minLength", "maxLength",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems",
    "maxItems",
})  # fmt: skip
LOOSE_KEYWORDS = STRICT_KEYWORDS | {"allOf", "oneOf", "uniqueItems"}
STRICT_FORMATS = frozenset({
    "date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid",
})  # fmt: skip
TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})

MAX_NESTING = 10  # OpenAI: up to 10 levels of object nesting
MAX_PROPERTIES = 5000  # OpenAI: up to 5,000 object properties in total
MAX_ENUM_VALUES = 1000  # OpenAI: up to 1,000 enum values in total
MAX_MIN_ITEMS = 1000  # fastmode: what one reply may be forced to contain
MAX_MIN_LENGTH = 100_000
MAX_NODES = 20_000  # subschemas in total


class SchemaRejected(ValueError):
    """A schema outside the subset: ``context`` is where (a path of keys), ``reason`` what."""

    def __init__(self, context: tuple[str, ...], reason: str, keyword: str) -> None:
        super().__init__(f"In context={context!r}, {reason}")
        self.context = context
        self.reason = reason
        self.keyword = keyword


def check_schema(schema: Any, *, strict: bool) -> None:
    """Raise ``SchemaRejected`` if ``schema`` is outside the subset (see the module doc).

    Agents send the same schema with every turn, so the verdict is cached by the schema's
    canonical JSON text."""
    if not isinstance(schema, Mapping):
        raise SchemaRejected((), "the schema must be a JSON object.", "schema")
    try:
        text = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        raise SchemaRejected((), "the schema is not JSON.", "schema") from None
    verdict = _verdict(text, strict)
    if verdict is not None:
        raise SchemaRejected(*verdict)


@functools.lru_cache(maxsize=256)
def _verdict(text: bytes, strict: bool) -> tuple[tuple[str, ...], str, str] | None:
    schema = orjson.loads(text)
    try:
        # the meta-schema check in Rust: ~100x faster than the pure-Python one on big schemas
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = tuple(str(p) for p in exc.instance_path)
        last = where[-1] if where and not where[-1].isdigit() else "schema"
        return where, f"'{last}' is invalid: {exc.message[:200]}", last
    except jsonschema_rs.ReferencingError as exc:
        return (), f"a reference cannot be resolved: {str(exc)[:200]}", "$ref"
    try:
        if strict and _kind(schema) != "object":
            raise SchemaRejected((), "schema must be a JSON Schema of 'type: \"object\"', "
                                 f"got 'type: {schema.get('type')!r}'.", "type")
        _Walker(schema, strict).walk(schema, (), 0)
    except SchemaRejected as exc:
        return exc.context, exc.reason, exc.keyword
    return None


def _kind(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and "properties" in schema:
        return "object"
    return kind if isinstance(kind, str) else None


class _Walker:
    def __init__(self, root: Mapping[str, Any], strict: bool) -> None:
        self.root = root
        self.strict = strict
        self.allowed = STRICT_KEYWORDS if strict else LOOSE_KEYWORDS
        self.formats = STRICT_FORMATS if strict else FORMATS
        self.nodes = 0
        self.properties = 0
        self.enums = 0

    def fail(self, ctx: tuple[str, ...], reason: str, keyword: str) -> None:
        raise SchemaRejected(ctx, reason, keyword)

    def walk(self, node: Any, ctx: tuple[str, ...], nesting: int) -> None:
        if isinstance(node, bool):
            if self.strict:
                self.fail(ctx, "a boolean schema is not permitted.", "schema")
            return
        if not isinstance(node, Mapping):
            self.fail(ctx, "a schema must be a JSON object.", "schema")
            return
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(ctx, f"the schema has more than {MAX_NODES} subschemas.", "schema")
        for key in node:
            if key not in self.allowed and key not in ANNOTATIONS:
                self.fail(ctx, f"'{key}' is not permitted.", key)
        self.check_node(node, ctx, nesting)
        for name, sub in (node.get("properties") or {}).items():
            self.properties += 1
            self.walk(sub, (*ctx, "properties", name), nesting + 1)
        if self.properties > MAX_PROPERTIES:
            self.fail(ctx, f"the schema has more than {MAX_PROPERTIES} properties.", "properties")
        items = node.get("items")
        if isinstance(items, Mapping | bool):
            self.walk(items, (*ctx, "items"), nesting + 1)
        elif isinstance(items, list):
            self.fail(ctx, "'items' must be a schema, not a list.", "items")
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            self.walk(extra, (*ctx, "additionalProperties"), nesting + 1)
        for key in ("anyOf", "oneOf", "allOf"):
            for i, sub in enumerate(node.get(key) or ()):
                self.walk(sub, (*ctx, key, str(i)), nesting)
        for key in ("$defs", "definitions"):
            for name, sub in (node.get(key) or {}).items():
                self.walk(sub, (*ctx, key, name), 0)

    def check_node(self, node: Mapping[str, Any], ctx: tuple[str, ...], nesting: int) -> None:
        if nesting > MAX_NESTING:
            self.fail(ctx, f"the schema nests more than {MAX_NESTING} levels.", "properties")
        kinds = node.get("type")
        for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
            if kind not in TYPES:
                self.fail(ctx, f"type {kind!r} is not permitted.", "type")
        enum = node.get("enum")
        if isinstance(enum, list):
            self.enums += len(enum)
            if self.enums > MAX_ENUM_VALUES:
                self.fail(ctx, f"the schema has more than {MAX_ENUM_VALUES} enum values.", "enum")
        fmt = node.get("format")
        if fmt is not None and fmt not in self.formats:
            self.fail(ctx, f"format {fmt!r} is not permitted; supported: "
                      f"{', '.join(sorted(self.formats))}.", "format")
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            try:
                re.compile(pattern)
            except re.error as exc:
                self.fail(ctx, f"'pattern' is not a valid regular expression ({exc}).", "pattern")
        for key, limit in (("minItems", MAX_MIN_ITEMS), ("minLength", MAX_MIN_LENGTH)):
            value = node.get(key)
            if isinstance(value, int) and value > limit:
                self.fail(ctx, f"'{key}' of {value} is over fastmode's limit of {limit}.", key)
        ref = node.get("$ref")
        if isinstance(ref, str) and not self.resolves(ref):
            self.fail(ctx, f"'$ref' {ref!r} does not point into this schema.", "$ref")
        if self.strict and _kind(node) == "object":
            self.check_strict_object(node, ctx)

    def check_strict_object(self, node: Mapping[str, Any], ctx: tuple[str, ...]) -> None:
        if node.get("additionalProperties") is not False:
            self.fail(ctx, "'additionalProperties' is required to be supplied and to be false.",
                      "additionalProperties")
        props = list(node.get("properties") or {})
        required = node.get("required") or []
        missing = [p for p in props if p not in required]
        if missing:
            self.fail(ctx, "'required' is required to be supplied and to be an array including "
                      f"every key in properties. Missing '{missing[0]}'.", "required")
        extra = [r for r in required if r not in props]
        if extra:
            self.fail(ctx, f"'required' names '{extra[0]}', which is not in properties.",
                      "required")

    def resolves(self, ref: str) -> bool:
        if not ref.startswith("#"):
            return False
        target: Any = self.root
        for part in ref[1:].strip("/").split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                return False
            target = target[part]
        return isinstance(target, Mapping | bool)
