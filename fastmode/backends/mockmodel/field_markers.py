"""Replies in the field markers DSPy's Chat adapter asks for.

DSPy's ``ChatAdapter`` (the default for ``dspy.Predict`` and ``dspy.ChainOfThought``) sends the
signature's output fields in its system message ("Your output fields are: 1. `answer` (str):
2. `confidence` (float):") and a structure of ``[[ ## name ## ]]`` markers with a type note per
field, and ends the user turn with "Respond with the corresponding output fields, starting with
the field `[[ ## answer ## ]]`, then `[[ ## confidence ## ]]` (must be formatted as a valid
Python float), and then ending with the marker for `[[ ## completed ## ]]`." It parses the reply
by those markers and each value by its type; prose fails it (``AdapterParseError``).

The mock answers in that structure: each output field in order, its value generated from the
field's schema (``type_notes``: float, int, bool, list, Literal, a JSON schema) and the user's
text (entities it states are used, ``entities``), written as DSPy parses it (``True``/``False``,
JSON for lists and objects, a Literal's option bare), then ``[[ ## completed ## ]]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmode.backends.mockmodel.pieces import finish_text
from fastmode.backends.mockmodel.request import (
    Generation,
    GenerationRequest,
    cue_text,
    message_text,
)
from fastmode.backends.mockmodel.schema_values import bounded_value
from fastmode.backends.mockmodel.streams import Streams
from fastmode.backends.mockmodel.type_notes import from_note, from_python_type

COMPLETED = "[[ ## completed ## ]]"
_MARKER = re.compile(r"\[\[ ## (\w+) ## \]\]")
_ASK = re.compile(r"Respond with the corresponding output fields[^\n]*?starting with the field",
                  re.I)
_ORDERED = re.compile(r"`\[\[ ## (\w+) ## \]\]`(?:\s*\(must be formatted as a valid Python "
                      r"(.+?)\)(?=,|\s+and then|$))?")
_OUTPUTS = re.compile(r"Your output fields are:\s*\n(?P<list>(?:\s*\d+\.\s+`\w+`.*\n?)+)")
_FIELD_LINE = re.compile(r"^\s*\d+\.\s+`(\w+)`\s+\((.*)\):", re.M)
_NOTE = re.compile(r"\[\[ ## (\w+) ## \]\]\s*\n\{\1\}[ \t]*#\s*note:\s*the value you produce "
                   r"(.+)$", re.M)


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    schema: Mapping[str, Any]


def asked_fields(messages: Sequence[Mapping[str, Any]]) -> list[Field] | None:
    """The output fields the last user turn asks for in markers, typed; None if it does not
    ask for DSPy's field markers."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last is None or messages[-1] is not last:
        return None
    ask = cue_text(message_text(last))
    found = _ASK.search(ask)
    if found is None or COMPLETED not in ask:
        return None
    system = "\n".join(cue_text(message_text(m)) for m in messages
                       if m.get("role") in ("system", "developer"))
    listed = _OUTPUTS.search(system)
    types = dict(_FIELD_LINE.findall(listed.group("list"))) if listed else {}
    notes = dict(_NOTE.findall(system))
    out: list[Field] = []
    for name, python_type in _ORDERED.findall(ask[found.start():]):
        if name == "completed":
            break
        schema = (from_note(notes[name], name) if name in notes else None) \
            or from_python_type(python_type or types.get(name, "str"), name) \
            or {"type": "string"}
        out.append(Field(name, schema))
    return out or None


def marker_reply(req: GenerationRequest, fields: Sequence[Field], streams: Streams,
                 user_text: str) -> Generation:
    rng = streams("fields")
    parts = []
    for f in fields:
        value, _ = bounded_value(f.schema, rng, key=f.name, context=user_text)
        parts.append(f"[[ ## {f.name} ## ]]\n{_written(value)}")
    text = "\n\n".join([*parts, COMPLETED])
    return finish_text(text, req.max_tokens, req.stop)


def _written(value: Any) -> str:
    """A value as DSPy's parser reads it for the field's type."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)
