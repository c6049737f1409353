"""The types a prompt states for each output field in words, as JSON schemas.

DSPy writes a note beside every typed output field, in its Chat adapter's field markers and in
its JSON adapter's example object alike: ``{confidence}        # note: the value you produce
must be a single float value``; ``must be True or False``; ``must exactly match (no extra
characters) one of: positive; negative; neutral``; ``must adhere to the JSON schema: {...}``.
Its instructions also name the type: ``(must be formatted as a valid Python float)``, and its
field list ``2. `confidence` (float):``. A model that ignores them writes a word where a float
goes and DSPy's parser raises; the mock reads them.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

NOTE = re.compile(r"#\s*note:\s*the value you produce (?P<rule>.+)$", re.I | re.M)
_ONE_OF = re.compile(r"one of:\s*(?P<options>.+?)\s*$", re.I)
_SCHEMA = re.compile(r"adhere to the JSON schema:\s*(?P<schema>\{.*\})\s*$", re.I)
# fields whose float is a probability: a model answers these between 0 and 1
UNIT_INTERVAL = frozenset({"confidence", "probability", "certainty", "likelihood", "prob"})


def from_note(rule: str, key: str = "") -> dict[str, Any] | None:
    """The schema of a note's rule (the text after "the value you produce"), or None."""
    rule = rule.strip()
    found = _SCHEMA.search(rule)
    if found:
        try:
            schema = json.loads(found.group("schema"))
        except ValueError:
            return None
        return schema if isinstance(schema, dict) else None
    found = _ONE_OF.search(rule)
    if found:
        options = [o.strip() for o in found.group("options").split(";") if o.strip()]
        return {"type": "string", "enum": options} if options else None
    low = rule.lower()
    if "true or false" in low:
        return {"type": "boolean"}
    if "single int" in low:
        return {"type": "integer"}
    if "single float" in low:
        return number(key)
    return None


def number(key: str) -> dict[str, Any]:
    if key.lower() in UNIT_INTERVAL:
        return {"type": "number", "minimum": 0, "maximum": 1}
    return {"type": "number"}


def from_python_type(text: str, key: str = "") -> dict[str, Any] | None:
    """A schema for a Python annotation as DSPy prints it: ``str``, ``int``, ``float``,
    ``bool``, ``list[str]``, ``dict[str, int]``, ``Literal['a', 'b']``; None if unknown."""
    t = text.strip()
    simple = {"str": {"type": "string"}, "int": {"type": "integer"},
              "bool": {"type": "boolean"}}
    if t in simple:
        return dict(simple[t])
    if t == "float":
        return number(key)
    if t.startswith("Literal[") and t.endswith("]"):
        try:
            options = ast.literal_eval(f"[{t[8:-1]}]")
        except (ValueError, SyntaxError):
            return None
        return {"enum": list(options)} if options else None
    for prefix in ("list[", "List[", "tuple[", "set["):
        if t.startswith(prefix) and t.endswith("]"):
            inner = from_python_type(t[len(prefix):-1].split(",")[0], "")
            return {"type": "array", "items": inner or {}}
    if t.startswith(("dict[", "Dict[")) or t == "dict":
        return {"type": "object"}
    return None


def from_example_string(value: str, key: str = "") -> dict[str, Any] | None:
    """The schema of a JSON example's string value that carries a type note
    (``"{confidence}  # note: ..."``); None for a plain string."""
    found = NOTE.search(value)
    return from_note(found.group("rule"), key) if found else None
