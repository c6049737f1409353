"""Structured outputs: a reply that is JSON fitting the request's schema (or any JSON object).

The value comes from the same generator as tool arguments (``schema_values``), echoing the
user's message where a property asks for a place or a query, and is written as compact JSON,
then tokenized like any reply, so a ``max_tokens`` cut leaves truncated JSON and
``finish_reason: length`` (the SDKs' ``parse()`` raises ``LengthFinishReasonError`` on it, as
with a real model). A tier whose quality profile has a ``structured_error_rate`` botches that
share of structured replies, reproducibly with the seed, the way a model without constrained
decoding does: malformed JSON, a required property left out, an undeclared one added.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from fastmode.backends.mockmodel.pieces import finish_text
from fastmode.backends.mockmodel.request import Generation, GenerationRequest, QualityProfile
from fastmode.backends.mockmodel.schema_values import DEFAULT_BUDGET, bounded_value, resolve_local
from fastmode.backends.mockmodel.streams import Streams

# what a model writes for "answer in JSON" when no schema says more
JSON_OBJECT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "topic": {"type": "string"},
        "points": {"type": "array", "items": {"type": "string"}, "minItems": 2,
                   "maxItems": 4},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["answer", "topic", "points", "confidence"],
}
STRUCTURED_BOTCH_KINDS = ("malformed_json", "missing_required", "invented_argument")
CHARS_PER_TOKEN_MAX = 6  # the tokenizer never puts more than 6 letters in a token


def structured_reply(
    req: GenerationRequest, streams: Streams, user_text: str, quality: QualityProfile,
    *, fenced: bool = False,
) -> Generation:
    """The JSON reply; ``fenced``: inside a ```json block, as a prompt asking for a code block
    gets it (``prompted_json``)."""
    fmt = req.response_format
    assert fmt is not None
    schema = fmt.schema if fmt.kind == "json_schema" and fmt.schema is not None else \
        JSON_OBJECT_SCHEMA
    cap = req.max_tokens
    # a budget past which the text is surely longer than the cap (it is cut there anyway)
    budget = DEFAULT_BUDGET if cap is None else (cap + 1) * CHARS_PER_TOKEN_MAX + 64
    value, overflowed = bounded_value(schema, streams("structured"), context=user_text,
                                      budget=budget)
    text = _dumps(value)
    rate = quality.structured_error_rate
    if rate > 0:
        rng = streams("structured_botch")
        if rng.random() < rate:
            text = botch_json(value, schema, rng)
    if fenced:
        text = f"```json\n{text}\n```"
    gen = finish_text(text, cap, req.stop)
    if overflowed and gen.finish_reason != "length":  # the whole value never fit
        gen = Generation(gen.pieces, gen.text, (), "length")
    return gen


def botch_json(value: Any, schema: Mapping[str, Any], rng: random.Random) -> str:
    """The reply as a weak model writes it: not JSON, or JSON that fails the schema."""
    kinds = list(STRUCTURED_BOTCH_KINDS)
    root = resolve_local(schema, schema)
    required = [k for k in (root.get("required") or ()) if isinstance(value, dict) and k in value]
    if not required:
        kinds.remove("missing_required")
    if not isinstance(value, dict):
        kinds.remove("invented_argument")
    kind = rng.choice(kinds)
    text = _dumps(value)
    if kind == "missing_required":
        victim = rng.choice(required)
        return _dumps({k: v for k, v in value.items() if k != victim})
    if kind == "invented_argument":
        props = root.get("properties") or {}
        name = next(n for n in ("notes", "extra", "comment", "metadata_x") if n not in props)
        return _dumps({**value, name: "see above"})
    cut = rng.randint(1, max(1, len(text) - 1))  # truncated: never parses
    broken = text[:cut]
    try:
        json.loads(broken)
    except ValueError:
        return broken
    return broken + "{"


def _dumps(value: Any) -> str:
    """Compact JSON, as models emit structured outputs."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
