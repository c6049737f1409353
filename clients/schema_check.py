"""A tiny JSON-schema checker for tool-call arguments (the client side must not import backends).

Supported: ``type`` (also a list), ``properties``, ``required``, ``additionalProperties`` (false
or a schema), ``enum``, ``const``, ``items``, ``minItems`` / ``maxItems``, ``minLength`` /
``maxLength``, ``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum``, ``anyOf``
/ ``oneOf`` (any branch), ``allOf``. Anything else is ignored. It exists to tell a well-formed
tool call from the mistakes a weak model makes, not to be a conformant validator.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _is_type(value: Any, name: str) -> bool:
    if name in ("number", "integer") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def check_value(value: Any, schema: Mapping[str, Any], path: str = "$") -> tuple[str, str] | None:
    """None if ``value`` fits ``schema``, else (kind, message) of the first problem found."""
    if not isinstance(schema, Mapping):
        return None
    t = schema.get("type")
    if t is not None:
        names = [t] if isinstance(t, str) else list(t)
        if not any(_is_type(value, n) for n in names):
            return "wrong_type", f"{path}: expected {'/'.join(names)}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return "not_in_enum", f"{path}: {value!r} not in {schema['enum']!r}"
    if "const" in schema and value != schema["const"]:
        return "not_const", f"{path}: {value!r} != {schema['const']!r}"
    for key in ("anyOf", "oneOf"):
        if key in schema and all(check_value(value, s, path) for s in schema[key]):
            return "no_branch", f"{path}: matches no branch of {key}"
    for sub in schema.get("allOf") or ():
        problem = check_value(value, sub, path)
        if problem:
            return problem
    if isinstance(value, dict):
        return _check_object(value, schema, path)
    if isinstance(value, list):
        return _check_array(value, schema, path)
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e18):
            return "length", f"{path}: string length {len(value)} out of bounds"
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return _check_number(value, schema, path)
    return None


def _check_object(value: dict[str, Any], schema: Mapping[str, Any], path: str):
    props: Mapping[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in value:
            return "missing_required", f"{path}: missing required property {name!r}"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            problem = check_value(item, props[name], f"{path}.{name}")
        elif extra is False:
            return "unexpected_property", f"{path}: unexpected property {name!r}"
        else:
            problem = check_value(item, extra, f"{path}.{name}") if isinstance(extra, Mapping) else None
        if problem:
            return problem
    return None


def _check_array(value: list[Any], schema: Mapping[str, Any], path: str):
    if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 1e18):
        return "length", f"{path}: {len(value)} items out of bounds"
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            problem = check_value(item, items, f"{path}[{i}]")
            if problem:
                return problem
    return None


def _check_number(value: float, schema: Mapping[str, Any], path: str):
    lo, hi = schema.get("minimum"), schema.get("maximum")
    xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        return "out_of_range", f"{path}: {value} outside [{lo}, {hi}]"
    if (xlo is not None and value <= xlo) or (xhi is not None and value >= xhi):
        return "out_of_range", f"{path}: {value} outside ({xlo}, {xhi})"
    return None


def tool_schema(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Tool name -> parameters schema, for chat-style (``function``) and flat tool definitions."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        if isinstance(fn, Mapping) and fn.get("name"):
            params = fn.get("parameters") or fn.get("input_schema") or {}
            out[str(fn["name"])] = params if "type" in params else {"type": "object", **params}
    return out


def check_tool_call(
    name: str, arguments: str, tools: Mapping[str, Mapping[str, Any]]
) -> tuple[str, str] | None:
    """None if the call names an offered tool and its arguments parse and fit its schema."""
    if name not in tools:
        return "unknown_tool", f"no tool named {name!r} was offered"
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        return "malformed_json", f"arguments are not JSON: {exc}"
    return check_value(value, tools[name])
