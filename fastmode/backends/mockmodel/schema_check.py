"""Checking tool-call arguments against their JSON schema, with the ``jsonschema`` library.

The tests, evals and the gateway use this to tell a well-formed call from a botched one, so it
is a conformant validator (Draft 2020-12 unless the schema's ``$schema`` names another draft;
``format`` is not asserted) rather than a hand-written approximation. What this module adds is
the reporting: every problem as one ``'<json path>: <what is wrong>'`` line in a stable order
(the value's own order, an object's problems before its members'), and a ``strict`` mode.

``strict`` reports a property the schema does not declare even when the schema does not say
``additionalProperties: false`` (OpenAI's strict mode requires it anyway): that is how an
invented argument is caught on a permissive schema. It is implemented by adding
``unevaluatedProperties: false`` wherever a value is described (not inside ``allOf`` /
``anyOf`` / ``oneOf`` branches, which would refuse each other's properties), so a property
declared by any branch that applies, or behind a ``$ref``, still counts as declared.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from fastmode.backends.mockmodel.schema_values import resolve_local

__all__ = ["validate_arguments", "validate_value"]

# keywords whose value is a map of name -> schema describing a value / applying in place
_VALUE_MAPS = ("properties", "patternProperties")
_DEF_MAPS = ("$defs", "definitions")
_VALUE_ONE = ("items", "additionalProperties", "additionalItems", "contains", "unevaluatedItems")
_VALUE_LISTS = ("prefixItems", "items")
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
# same-path problems are listed in this order (then in jsonschema's)
_RANK = {"const": 0, "enum": 1, "anyOf": 2, "oneOf": 3, "type": 4, "required": 5}


def validate_arguments(
    schema: Mapping[str, Any], arguments: str, *, strict: bool = False
) -> list[str]:
    """Problems with a tool call's raw ``arguments`` text against ``schema`` ([] = valid)."""
    try:
        value = json.loads(arguments)
    except (ValueError, TypeError) as exc:
        return [f"arguments are not valid JSON: {exc}"]
    if not isinstance(value, dict):
        return [f"arguments must be a JSON object, got {_json_type(value)}"]
    return validate_value(schema, value, strict=strict)


def validate_value(schema: Mapping[str, Any], value: Any, *, strict: bool = False) -> list[str]:
    """Problems with an already-parsed ``value`` against ``schema`` ([] = valid)."""
    try:
        text = json.dumps(schema, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return ["$: the schema is not JSON"]
    validator = _validator(text, strict)
    if isinstance(validator, str):
        return [validator]
    errors = sorted(validator.iter_errors(value), key=lambda e: _order(e, value))
    problems: list[str] = []
    seen: set[tuple[int, str]] = set()
    for error in errors:
        group = (id(error.schema), str(error.validator))
        if error.validator in ("required", "additionalProperties", "unevaluatedProperties"):
            if group in seen:  # one error per name: the first one reports them all
                continue
            seen.add(group)
        problems.extend(_describe(error, validator.schema))
    return problems


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str, strict: bool) -> Validator | str:
    """A checked validator for a schema (by its canonical JSON), or why the schema is bad."""
    schema = json.loads(schema_text)
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        return f"$: the schema is invalid: {exc.message}"
    if strict:
        keyword = (
            "unevaluatedProperties" if "unevaluatedProperties" in cls.VALIDATORS
            else "additionalProperties"
        )  # drafts before 2019-09 have no unevaluatedProperties
        schema = _strict(schema, True, keyword)
    validator: Validator = cls(schema)
    return validator


def _strict(schema: Any, describes_value: bool, keyword: str) -> Any:
    """A copy of ``schema`` where every value-describing subschema forbids undeclared names."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key in _VALUE_MAPS:
        sub = schema.get(key)
        if isinstance(sub, Mapping):
            out[key] = {k: _strict(v, True, keyword) for k, v in sub.items()}
    for key in _DEF_MAPS:  # applied where referenced: in place
        sub = schema.get(key)
        if isinstance(sub, Mapping):
            out[key] = {k: _strict(v, False, keyword) for k, v in sub.items()}
    for key in _VALUE_ONE:
        if isinstance(schema.get(key), Mapping):
            out[key] = _strict(schema[key], True, keyword)
    for key in _VALUE_LISTS:
        if isinstance(schema.get(key), list):
            out[key] = [_strict(s, True, keyword) for s in schema[key]]
    for key in _IN_PLACE_LISTS:
        if isinstance(schema.get(key), list):
            out[key] = [_strict(s, False, keyword) for s in schema[key]]
    for key in _IN_PLACE_ONE:
        if isinstance(schema.get(key), Mapping):
            out[key] = _strict(schema[key], False, keyword)
    if describes_value and not (
        "additionalProperties" in schema or "unevaluatedProperties" in schema
    ):
        out[keyword] = False
    return out


def _order(error: ValidationError, root: Any) -> tuple[list[int], int]:
    """Depth-first in the value's own order; an object's own problems before its members'."""
    where: list[int] = []
    node = root
    for step in error.absolute_path:
        if isinstance(node, dict):
            where.append(list(node).index(step) if step in node else len(node))
            node = node.get(step)
        elif isinstance(node, list) and isinstance(step, int):
            where.append(step)
            node = node[step] if step < len(node) else None
    return where, _RANK.get(str(error.validator), len(_RANK))


def _path(error: ValidationError) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def _describe(error: ValidationError, root: Any) -> Iterator[str]:
    """One line per problem, in the words the gateway and the evals have always used."""
    path, kw = _path(error), error.validator
    bound: Any = error.validator_value  # the keyword's value in the schema
    value: Any = error.instance
    if kw == "required":
        for name in bound:
            if isinstance(value, dict) and name not in value:
                yield f"{path}: missing required property {name!r}"
    elif kw in ("additionalProperties", "unevaluatedProperties"):
        names = _undeclared(error, root)
        if not names:
            yield f"{path}: {error.message}"
        for name in names:
            yield f"{path}: unexpected property {name!r}"
    elif kw == "type":
        kinds = bound if isinstance(bound, list) else [bound]
        yield f"{path}: expected {'/'.join(map(str, kinds))}, got {_json_type(value)}"
    elif kw == "const":
        yield f"{path}: must be {bound!r}"
    elif kw == "enum":
        yield f"{path}: {value!r} is not one of {list(bound)!r}"
    elif kw in ("anyOf", "oneOf"):
        if kw == "oneOf" and not error.context:
            yield f"{path}: matches more than one of the oneOf branches"
        else:
            yield f"{path}: matches none of the {kw} branches"
    elif kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        yield f"{path}: {value!r} is out of range"
    elif kw == "minLength":
        yield f"{path}: shorter than {bound} characters"
    elif kw == "maxLength":
        yield f"{path}: longer than {bound} characters"
    elif kw == "minItems":
        yield f"{path}: fewer than {bound} items"
    elif kw == "maxItems":
        yield f"{path}: more than {bound} items"
    elif kw == "uniqueItems":
        yield f"{path}: items are not unique"
    else:
        yield f"{path}: {error.message}"


def _undeclared(error: ValidationError, root: Any) -> list[str]:
    """The names an additional/unevaluatedProperties error is about, in the object's order."""
    value = error.instance
    if not isinstance(value, dict):
        return []
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties":  # only this schema's own names count
        names = set(schema.get("properties") or ())
        patterns = list(schema.get("patternProperties") or ())
    else:
        names, patterns = _declared(schema, root, 0)
    return [k for k in value if k not in names and not any(re.search(p, k) for p in patterns)]


def _declared(schema: Any, root: Any, depth: int) -> tuple[set[str], list[str]]:
    """Names and patterns declared by ``schema`` and everything it applies in place."""
    names: set[str] = set()
    patterns: list[str] = []
    if not isinstance(schema, Mapping) or depth > 8:
        return names, patterns
    names.update(schema.get("properties") or ())
    patterns.extend(schema.get("patternProperties") or ())
    parts: list[Any] = []
    for key in _IN_PLACE_LISTS:
        parts.extend(schema.get(key) or ())
    parts.extend(schema[key] for key in ("if", "then", "else") if key in schema)
    parts.extend((schema.get("dependentSchemas") or {}).values())
    if isinstance(schema.get("$ref"), str):
        parts.append(resolve_local(root, {"$ref": schema["$ref"]}))
    for part in parts:
        n, p = _declared(part, root, depth + 1)
        names |= n
        patterns += p
    return names, patterns


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
