"""JSON asked for in the prompt rather than the API: the schema or example the reply must fit.

Many clients ask for structured output in words: instructor's ``Mode.JSON`` / ``MD_JSON``
put the model's JSON schema in the system prompt ("...in json that match the following
json_schema: {...}", the latter "within a ```json codeblock"), pydantic-ai's
``PromptedOutput`` says "Always respond with a JSON object that's compatible with this
schema: {...}", LangChain's ``method="json_mode"`` sends ``response_format: json_object`` and
leaves the shape to the prompt. They parse the reply and validate it, so a generic JSON object
fails them. A real model follows the prompt; the mock does too:

* the prompt must **ask** for JSON (a verb such as respond / return / output / give ... JSON,
  or the words "JSON schema"), so a user who pastes JSON to ask about it still gets prose;
* the shape is the first JSON **schema** found (an object with ``properties``, or a ``type``
  with ``items`` / ``enum``), else the last JSON **example** (any other object), whose schema
  is derived (every key required, each value's type); fenced blocks and bare objects alike;
* in the system / developer messages and the last user message, as far as the model reads
  them (``cue_text``); the verdict is cached by the text, since agents repeat their prompts;
* a schema outside the generator's subset is pruned to the keywords it honours (and dropped
  if that is not enough); the reply is fenced in ```json when the prompt asks for a code block.

``structured.structured_reply`` then writes it, botched at the tier's ``structured_error_rate``
like an API-level schema.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmode.backends.mockmodel.named_keys import named_keys_schema
from fastmode.backends.mockmodel.request import ResponseFormat, cue_text, message_text
from fastmode.backends.mockmodel.schema_subset import (
    ANNOTATIONS,
    LOOSE_KEYWORDS,
    TYPES,
    SchemaRejected,
    check_schema,
)
from fastmode.backends.mockmodel.type_notes import from_example_string

ASKS_FOR_JSON = re.compile(
    r"\b(?:respond|reply|answer|return|output|format|provide|produce|give|write|generate|"
    r"emit)\w*\b[^\n.]{0,80}?\bjson\b|\bjson[ _-]?schema\b", re.I)
ASKS_FOR_FENCE = re.compile(r"```json|\bcode ?block\b", re.I)
MAX_OBJECTS = 64  # candidate "{" positions tried per prompt
MAX_EXAMPLE_DEPTH = 10  # OpenAI's nesting limit for schemas, applied to derived ones
_DECODER = json.JSONDecoder()
_KEEP = LOOSE_KEYWORDS | ANNOTATIONS


@dataclass(frozen=True, slots=True)
class PromptedJson:
    """What the prompt asks for: the format the reply fits, and whether to fence it."""

    format: ResponseFormat
    fenced: bool


def prompted_json(messages: Sequence[Mapping[str, Any]]) -> PromptedJson | None:
    """The JSON the prompt asks for, or None (the prompt asks for no JSON of a known shape)."""
    texts = [cue_text(message_text(m)) for m in messages
             if m.get("role") in ("system", "developer")]
    for message in reversed(messages):
        if message.get("role") == "user":
            texts.append(cue_text(message_text(message)))
            break
    return _find("\n\n".join(t for t in texts if t))


@functools.lru_cache(maxsize=64)  # at most 64 x ~50 KB of prompt text kept
def _find(text: str) -> PromptedJson | None:
    if "json" not in text.lower() or not ASKS_FOR_JSON.search(text):
        return None
    schema: Mapping[str, Any] | None = None
    example: Any = None
    for value in _objects(text):
        if _looks_like_schema(value):
            schema = _usable(value)
            if schema is not None:
                break
        else:
            example = value
    if schema is None and example is not None:
        schema = schema_of_example(example)
    if schema is None:
        schema = named_keys_schema(text)
    if schema is None:
        return None
    fmt = ResponseFormat("json_schema", schema, name="prompted")
    return PromptedJson(fmt, bool(ASKS_FOR_FENCE.search(text)))


def _objects(text: str) -> list[Any]:
    """The JSON objects written in ``text``, outermost only, in order."""
    out: list[Any] = []
    at, tried = text.find("{"), 0
    while at >= 0 and tried < MAX_OBJECTS:
        tried += 1
        try:
            value, end = _DECODER.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict) and value:
            out.append(value)
        at = text.find("{", end)
    return out


def _looks_like_schema(value: Mapping[str, Any]) -> bool:
    props = value.get("properties")
    if isinstance(props, Mapping) and (value.get("type") in (None, "object") or "required"
                                       in value):
        return True
    return value.get("type") in TYPES and any(k in value for k in ("items", "enum"))


def _usable(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The schema as the generator can honour it: as written, or with the keywords outside
    the subset pruned; None if even that is refused (too big, unresolvable ``$ref``)."""
    for candidate in (schema, _prune(schema)):
        try:
            check_schema(candidate, strict=False)
            return candidate
        except SchemaRejected:
            continue
    return None


def _prune(node: Any) -> Any:
    if isinstance(node, list):
        return [_prune(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, Mapping):
            out[key] = {name: _prune(sub) for name, sub in value.items()}
        elif key in _KEEP:
            out[key] = _prune(value)
    return out


def schema_of_example(value: Any, depth: int = 0, key: str = "") -> dict[str, Any]:
    """A schema every value shaped like ``value`` fits: objects with all their keys required,
    arrays of the first item's shape, scalars of their JSON type (a string with a type note,
    ``type_notes``, of the type it names)."""
    if depth >= MAX_EXAMPLE_DEPTH:
        return {}
    if isinstance(value, dict):
        return {"type": "object", "required": list(value),
                "properties": {k: schema_of_example(v, depth + 1, k) for k, v in value.items()}}
    if isinstance(value, list):
        out: dict[str, Any] = {"type": "array"}
        if value:
            out.update(items=schema_of_example(value[0], depth + 1), minItems=1)
        return out
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if value is None:
        return {"type": "null"}
    return from_example_string(value, key) or {"type": "string"}
