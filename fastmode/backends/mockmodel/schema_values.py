"""JSON values generated to fit a JSON schema: tool-call arguments and structured outputs.

The mock model has to emit tool calls an agent can execute and structured outputs a
``parse()`` helper accepts, so values are generated *from* the schema rather than invented;
``schema_check`` validates them with the ``jsonschema`` library, so a generated value is held to
the standard, not to this module's idea of it. ``schema_subset`` says which schemas a request
may send (a 400 names the keyword outside the subset).

Honoured keywords: ``type`` (also as a list), ``properties``, ``required``,
``additionalProperties`` (a schema: a few extra entries), ``enum``, ``const``, ``anyOf`` /
``oneOf`` (one branch, seeded), ``allOf``, local ``$ref`` (``#``, ``#/$defs/...``,
``#/definitions/...``, recursive too), ``minimum`` / ``maximum`` / ``exclusiveMinimum`` /
``exclusiveMaximum`` / ``multipleOf``, ``minLength`` / ``maxLength``, ``pattern`` (via
``schema_strings``), ``format`` (``schema_strings.FORMATS``), ``items``, ``minItems`` /
``maxItems``, ``uniqueItems``.

Bounded in time whatever the schema: optional parts (optional properties, array items beyond
``minItems``, non-null ``anyOf`` branches) are followed to ``MAX_DEPTH`` only, and generation
spends a character budget (the reply's token cap, in characters): once it is spent, the rest of
the value is the smallest stub of each type. A reply that ran out of budget is longer than its
cap anyway, so it is cut at the cap (``finish_reason: length``) like a real model's would be.
"""

from __future__ import annotations

import math
import operator
import random
import re
from collections.abc import Callable, Mapping
from typing import Any

from fastmode.backends.mockmodel.entities import extract
from fastmode.backends.mockmodel.schema_strings import (
    formatted,
    key_phrase,
    padding,
    pattern_string,
    plausible,
    proper_nouns,
)

__all__ = ["DEFAULT_BUDGET", "MAX_DEPTH", "bounded_value", "generate_value", "resolve_local"]

MAX_DEPTH = 6  # deeper (or recursive) schemas get only what they require
_HARD_DEPTH = 64  # a required recursion never ends: stubs from here on
DEFAULT_BUDGET = 200_000  # characters, when the caller gives no cap


def generate_value(
    schema: Mapping[str, Any], rng: random.Random, *, key: str = "", context: str = "",
    budget: int = DEFAULT_BUDGET,
) -> Any:
    """A JSON value that satisfies ``schema`` (see ``bounded_value``)."""
    return bounded_value(schema, rng, key=key, context=context, budget=budget)[0]


def bounded_value(
    schema: Mapping[str, Any], rng: random.Random, *, key: str = "", context: str = "",
    budget: int = DEFAULT_BUDGET,
) -> tuple[Any, bool]:
    """(value, ran out of budget). ``key`` (the property name) steers free strings towards
    plausible values; ``context`` (the user's message) lets places and queries echo what the
    user asked about, so a scripted agent test sees ``{"city":"Paris"}`` after asking about
    Paris."""
    gen = _Generator(schema, rng, context, budget)
    value = gen.value(schema, key, 0)
    return value, gen.left < 0


class _Generator:
    """Walks a schema; holds the root so local ``$ref`` pointers can be resolved."""

    def __init__(self, root: Mapping[str, Any], rng: random.Random, context: str,
                 budget: int) -> None:
        self.root = root
        self.rng = rng
        self.names = proper_nouns(context)
        self.found = extract(context)  # what the text states: names, places, ages
        self.phrase = key_phrase(context)
        self.left = budget
        self._writer: Any = None

    def sentence(self) -> str:
        if self._writer is None:
            from fastmode.backends.mockmodel.prose import (
                Writer,  # prose imports nothing from here; imported on first use
            )

            self._writer = Writer(self.rng, None)
        return str(self._writer.sentence())

    def value(self, schema: Any, key: str, depth: int) -> Any:
        schema = resolve_local(self.root, schema)
        if not isinstance(schema, Mapping):
            return self.string({}, key)  # ``true`` / garbage: any JSON will do
        if self.left < 0 or depth > _HARD_DEPTH:
            return _stub(self.root, schema)
        if "description" in schema:
            schema = with_hints(schema)
        if "const" in schema:
            self.left -= len(str(schema["const"])) + 2
            return schema["const"]
        if schema.get("enum"):
            choice = self.rng.choice(list(schema["enum"]))
            self.left -= len(str(choice)) + 2
            return choice
        for branch_key in ("anyOf", "oneOf"):
            branches = schema.get(branch_key)
            if branches:
                branch = self.branch(branches, depth)
                return self.value(_merge_branch(schema, branch, branch_key), key, depth)
        if schema.get("allOf"):
            return self.value(_merge_all_of(self.root, schema), key, depth)
        kind = _pick_type(schema)
        self.left -= 1
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

    def branch(self, branches: list[Any], depth: int) -> Any:
        """A seeded branch of anyOf/oneOf; past ``MAX_DEPTH`` the one that ends soonest (null or
        a scalar), so recursive schemas (``Optional[Node]``) terminate."""
        resolved = [resolve_local(self.root, b) for b in branches]
        if depth >= MAX_DEPTH:
            order = sorted(range(len(branches)), key=lambda i: _weight(resolved[i]))
            return branches[order[0]]
        weights = [1.0 if _is_null(b) else 3.0 for b in resolved]
        return self.rng.choices(branches, weights=weights)[0]

    def object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        """All required properties, and each optional one with probability 1/2."""
        props: Mapping[str, Any] = schema.get("properties") or {}
        required = [k for k in schema.get("required") or () if isinstance(k, str)]
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or (depth < MAX_DEPTH and self.rng.random() < 0.5):
                self.left -= len(name) + 4
                out[name] = self.value(sub, name, depth + 1)
        for name in required:  # required but not described: any string will do
            if name not in out:
                out[name] = self.string({}, name)
        extra = schema.get("additionalProperties")
        if not props and isinstance(extra, Mapping) and extra and depth < MAX_DEPTH:
            lo = int(schema.get("minProperties", 1))
            for i in range(max(lo, self.rng.randint(1, 3))):
                name = f"{padding(self.rng)}_{i + 1}"
                out[name] = self.value(extra, name, depth + 1)
        return out

    def array(self, schema: Mapping[str, Any], key: str, depth: int) -> list[Any]:
        lo = int(schema.get("minItems", 0))
        hi = int(schema.get("maxItems", max(lo, 4)))
        if depth >= MAX_DEPTH or hi <= lo:
            n = lo
        else:  # fewer optional items the deeper: a recursive list (a tree) stays small
            spread = max(0, 4 - depth // 2)
            least = max(lo, min(1, hi)) if depth < 2 else lo
            n = self.rng.randint(least, max(least, min(hi, lo + spread)))
        items = schema.get("items", {})
        if isinstance(items, list):  # old tuple form: the first schema for every item
            items = items[0] if items else {}
        unique = bool(schema.get("uniqueItems"))
        out: list[Any] = []
        for _ in range(n * 4 if unique else n):
            if self.left < 0 and len(out) >= lo:
                break
            candidate = self.value(items, _singular(key), depth + 1)
            if not (unique and candidate in out):
                out.append(candidate)
                self.left -= 1
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
        lo, hi = int(lo), int(max(lo, hi))  # lo > hi: unsatisfiable, give lo
        if hi - lo > PLAUSIBLE_SPAN:  # "minimum 0, maximum 2^53": a model picks a small value
            hi = lo + PLAUSIBLE_SPAN
        step = schema.get("multipleOf")
        if isinstance(step, int) and not isinstance(step, bool) and step > 0:
            first, last = math.ceil(lo / step), math.floor(hi / step)
            value = step * self.rng.randint(first, max(first, last))
        else:
            value = self.rng.randint(lo, hi)
        stated = self.found.integer(key, lo, hi) if self.found else None
        value = value if stated is None else stated
        self.left -= len(str(value))
        return value

    def number(self, schema: Mapping[str, Any]) -> float:
        lo, hi = _bounds(schema, integer=False)
        lo = 0.0 if lo is None else lo
        hi = (lo + 100.0) if hi is None else hi
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and not isinstance(step, bool) and step > 0:
            first, last = math.ceil(lo / step), math.floor(hi / step)
            k = self.rng.randint(first, max(first, last))
            value = float(round(k * step, 10))
        else:
            value = round(self.rng.uniform(lo, hi), 2)
            if not _number_ok(schema, value):  # rounding pushed it out: use the midpoint
                value = (lo + hi) / 2
        self.left -= len(str(value))
        return value

    def string(self, schema: Mapping[str, Any], key: str) -> str:
        lo = int(schema.get("minLength", 0))
        hi_raw = schema.get("maxLength")
        hi = int(hi_raw) if hi_raw is not None else None
        text: str | None = None
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            text = pattern_string(pattern, self.rng, lo, hi)
        if text is None:
            text = formatted(schema.get("format"), self.rng)
        if text is None and self.found:
            text = self.found.string(key)
        if text is None:
            text = plausible(key, self.rng, self.sentence, self.names, self.phrase)
            while len(text) < lo:  # pad with words, not noise, so long minimums still read well
                text += " " + padding(self.rng)
            if hi is not None and len(text) > hi:
                text = text[:hi].rstrip() if hi > 0 else ""
                text = text + "x" * (lo - len(text)) if len(text) < lo else text
        self.left -= len(text) + 2
        return text


# Anthropic's SDK moves the keywords its structured outputs do not take (pattern, bounds) into
# the description as "{pattern: ^\d{5}$, maximum: 99}", "so that the model might follow them";
# the mock model follows them.
_HINT_KEYS = ("pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
              "multipleOf", "minLength", "maxLength", "minItems", "maxItems", "format")
_HINT_BLOCK = re.compile(r"\{((?:" + "|".join(_HINT_KEYS) + r"): .*)\}\s*$", re.DOTALL)
_HINT_SPLIT = re.compile(r", (?=(?:" + "|".join(_HINT_KEYS) + r"): )")


def with_hints(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` plus the keywords its description states in the SDK's ``{key: value}`` form
    (never overriding a keyword the schema has)."""
    description = schema.get("description")
    match = _HINT_BLOCK.search(description) if isinstance(description, str) else None
    if match is None:
        return schema
    extra: dict[str, Any] = {}
    for item in _HINT_SPLIT.split(match.group(1)):
        key, _, raw = item.partition(": ")
        if key in schema:
            continue
        if key in ("pattern", "format"):
            extra[key] = raw
            continue
        try:
            number = float(raw)
        except ValueError:
            continue
        extra[key] = int(number) if number.is_integer() and "." not in raw else number
    return {**schema, **extra} if extra else schema


def _is_null(schema: Any) -> bool:
    return isinstance(schema, Mapping) and schema.get("type") == "null"


def _weight(schema: Any) -> int:
    """How far a branch is from ending: null 0, scalars 1, containers and references 2."""
    if not isinstance(schema, Mapping) or _is_null(schema):
        return 0
    kind = schema.get("type")
    if isinstance(kind, list) and "null" in kind:
        return 0
    if kind in ("string", "integer", "number", "boolean") or "enum" in schema or "const" in schema:
        return 1
    return 2


def _stub(root: Mapping[str, Any], schema: Mapping[str, Any]) -> Any:
    """The smallest value of a schema's type, once the budget is spent."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return list(schema["enum"])[0]
    for branch_key in ("anyOf", "oneOf"):
        branches = schema.get(branch_key)
        if branches:
            first = resolve_local(root, branches[0])
            return _stub(root, first if isinstance(first, Mapping) else {})
    makers: dict[str, Callable[[], Any]] = {
        "object": dict, "array": list, "integer": lambda: 0, "number": lambda: 0.0,
        "boolean": lambda: False, "null": lambda: None,
    }
    return makers.get(_pick_type(schema), str)()


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


# the widest range an integer is drawn from: a bound such as JavaScript's MAX_SAFE_INTEGER says
# what is allowed, not what a model writes (an offset of 2,426,141,073,616 into a file)
PLAUSIBLE_SPAN = 100


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
    if "age" in words:
        return 18, 80
    if words & {"limit", "count", "num", "top", "max", "size", "n", "k", "results", "page"}:
        return 1, 20
    return 1, 100


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
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) and part else target
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**target, **siblings} if isinstance(target, Mapping) else {}
    return {}


# a JSON Schema number bound and the comparison a value must pass against it
_NUMBER_BOUNDS: tuple[tuple[str, Callable[[float, float], bool]], ...] = (
    ("minimum", operator.ge),
    ("maximum", operator.le),
    ("exclusiveMinimum", operator.gt),
    ("exclusiveMaximum", operator.lt),
)


def _number_ok(schema: Mapping[str, Any], value: float) -> bool:
    for keyword, ok in _NUMBER_BOUNDS:
        bound = schema.get(keyword)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and not ok(value, bound):
            return False
    return True
