"""JSON keys a prompt names in words rather than in an example or a schema.

LangChain's ``json_mode`` example asks "Tell me a joke about cats, respond in JSON with
`setup` and `punchline` keys"; others write "with the keys "title" and "year"" or "keys:
name, age, city". A model answers with exactly those keys; a generic object fails the client
that reads them. Names count when they are quoted (backticks, single or double quotes) in the
sentence that says key / field / property, or listed after "keys:" / "fields:". Each value's
type follows its name (``age`` an integer, ``confidence`` a number, ``is_…`` a boolean,
``tags`` a list of strings), else a string; ``prompted_json`` calls this only once the prompt
asks for JSON.
"""

from __future__ import annotations

import re
from typing import Any

from fastmode.backends.mockmodel.type_notes import number

_WORD = re.compile(r"\b(?:keys?|fields?|properties|property|attributes)\b", re.I)
_QUOTED = re.compile(r"([`\"'])([A-Za-z_][\w-]{0,40})\1")
_LISTED = re.compile(
    r"\b(?:keys|fields|properties|attributes)\s*:\s*"
    r"((?:[A-Za-z_][\w-]{0,40}\s*(?:,|\band\b|&)\s*)+(?:and\s+)?[A-Za-z_][\w-]{0,40})", re.I)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")
MAX_KEYS = 32
_INTEGER = frozenset({"age", "count", "year", "years", "quantity", "number", "num", "total",
                      "rank", "rating", "stars", "minutes", "hours", "days", "size", "length"})
_NUMBER = frozenset({"score", "price", "cost", "amount", "temperature", "weight", "height",
                     "ratio", "percent", "percentage"})
_ARRAY = frozenset({"tags", "items", "steps", "points", "keywords", "ingredients", "examples",
                    "names", "list", "options", "reasons", "pros", "cons", "topics"})


def _sentence(text: str, at: int) -> str:
    """The sentence around position ``at``."""
    start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, at)), default=0)
    end = _SENTENCE_END.search(text, at)
    return text[start:end.start() if end else len(text)]


def named_keys(text: str) -> list[str]:
    """The keys the prompt names, in order of first mention; [] if it names none."""
    out: list[str] = []
    for m in _LISTED.finditer(text):
        out += [w for w in re.split(r"\s*(?:,|\band\b|&)\s*", m.group(1)) if w]
    for m in _WORD.finditer(text):
        out += [q.group(2) for q in _QUOTED.finditer(_sentence(text, m.start()))]
    seen = list(dict.fromkeys(k for k in out if k.lower() not in ("json", "and", "or")))
    return seen[:MAX_KEYS]


def value_schema(key: str) -> dict[str, Any]:
    low = key.lower()
    words = set(re.split(r"[_-]", low))
    if low.startswith(("is_", "has_", "can_", "should_")):
        return {"type": "boolean"}
    if words & _INTEGER:
        return {"type": "integer"}
    if low in _NUMBER or low in ("confidence", "probability"):
        return number(low) if low in ("confidence", "probability") else {"type": "number"}
    if low in _ARRAY:
        return {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4}
    return {"type": "string"}


def named_keys_schema(text: str) -> dict[str, Any] | None:
    """An object schema with the named keys, all required; None if the prompt names none."""
    keys = named_keys(text)
    if not keys:
        return None
    return {"type": "object", "required": keys,
            "properties": {k: value_schema(k) for k in keys}, "additionalProperties": False}
