"""Tool-call validity for the bench: does a call name an offered tool with valid arguments?

Validation is the ``jsonschema`` library (Draft 2020-12 unless the schema's ``$schema`` names
another draft; ``format`` is not asserted), so the bench holds the server to the standard. What
this module adds is the classification the report counts: each invalid call gets the kind of
its first problem (``malformed_json``, ``unknown_tool``, ``missing_required``,
``unexpected_property``, ``wrong_type``, ``not_in_enum``, ``not_const``, ``no_branch``,
``length``, ``out_of_range``, else the JSON-schema keyword that failed) and a message.

The client side never imports ``backends``: the server's own checker lives there, this one is
the bench's independent opinion.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

_KINDS = {
    "type": "wrong_type",
    "enum": "not_in_enum",
    "const": "not_const",
    "anyOf": "no_branch",
    "oneOf": "no_branch",
    "required": "missing_required",
    "additionalProperties": "unexpected_property",
    "unevaluatedProperties": "unexpected_property",
    "minLength": "length",
    "maxLength": "length",
    "minItems": "length",
    "maxItems": "length",
    "minimum": "out_of_range",
    "maximum": "out_of_range",
    "exclusiveMinimum": "out_of_range",
    "exclusiveMaximum": "out_of_range",
}
# the first problem is the shallowest; at one path, in this order
_RANK = {"type": 0, "enum": 1, "const": 2, "anyOf": 3, "oneOf": 3, "required": 4}


def check_value(value: Any, schema: Mapping[str, Any], path: str = "$") -> tuple[str, str] | None:
    """None if ``value`` fits ``schema``, else (kind, message) of the first problem found.

    ``path`` names ``value`` in messages (``$`` for the arguments object).
    """
    if not isinstance(schema, Mapping):
        return None
    try:
        text = json.dumps(schema, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return "invalid_schema", f"{path}: the schema is not JSON"
    validator = _validator(text)
    if isinstance(validator, str):
        return "invalid_schema", f"{path}: the schema is invalid: {validator}"
    first = min(validator.iter_errors(value), key=_order, default=None)
    if first is None:
        return None
    kw = str(first.validator)
    where = path + "".join(
        f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.absolute_path
    )
    return _KINDS.get(kw, kw), f"{where}: {first.message}"


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str) -> Validator | str:
    """A checked validator for a schema (by its canonical JSON), or why the schema is bad."""
    schema = json.loads(schema_text)
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        return exc.message
    validator: Validator = cls(schema)
    return validator


def _order(error: ValidationError) -> tuple[int, int]:
    return len(error.absolute_path), _RANK.get(str(error.validator), len(_RANK))


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
