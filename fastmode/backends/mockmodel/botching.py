"""Botched tool calls: the mistakes a weak model makes, at the quality profile's rate.

A tier's ``QualityProfile`` says how often a call goes wrong and which kinds of mistake it
makes, by weight: malformed JSON, a tool name nobody offered, a required argument left out, an
argument nobody declared. Every botch is detectable by a client (a wrong name, or arguments
that fail the schema in strict mode), reproducibly with the seed, so evals can count them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from fastmode.backends.mockmodel.request import BOTCH_KINDS, QualityProfile, ToolCall, ToolSpec
from fastmode.backends.mockmodel.toolcalls import dumps, object_schema


def maybe_botch(
    call: ToolCall,
    arguments: dict[str, Any],
    tool: ToolSpec,
    tools: Sequence[ToolSpec],
    quality: QualityProfile,
    rng: random.Random,
) -> ToolCall:
    """``call`` as is, or botched with probability ``quality.tool_error_rate``."""
    if quality.tool_error_rate > 0 and rng.random() < quality.tool_error_rate:
        return botch(call, arguments, tool, tools, quality, rng)
    return call


_NAME_SWAPS = {
    "get": "fetch", "fetch": "get", "search": "find", "find": "search", "create": "make",
    "make": "create", "list": "get_all", "read": "open", "write": "save", "save": "store",
    "run": "execute", "execute": "run", "send": "post", "update": "modify", "delete": "remove",
    "remove": "delete", "lookup": "search", "query": "search",
}  # fmt: skip
_NAME_SUFFIXES = ("_v2", "_tool", "_api", "_info", "s")
_INVENTED = (
    ("verbose", True), ("format", "json"), ("timeout_ms", 30000), ("session_id", "abc123"),
    ("include_metadata", True), ("dry_run", False), ("locale", "en-US"), ("max_results", 10),
)  # fmt: skip


def botch(
    call: ToolCall,
    arguments: dict[str, Any],
    tool: ToolSpec,
    tools: Sequence[ToolSpec],
    quality: QualityProfile,
    rng: random.Random,
) -> ToolCall:
    """Make one of the mistakes a weak model makes; the kind is drawn by weight."""
    required = [k for k in object_schema(tool.parameters).get("required") or () if k in arguments]
    weights = {k: float(w) for k, w in quality.error_kinds.items() if k in BOTCH_KINDS and w > 0}
    if not required:
        weights.pop("missing_required", None)  # nothing to drop: make another mistake
    if not weights:
        return call
    kind = rng.choices(list(weights), weights=list(weights.values()))[0]
    if kind == "malformed_json":
        return replace(call, arguments=_malform(call.arguments, rng), botched=kind)
    if kind == "unknown_tool":
        return replace(call, name=_wrong_name(tool.name, tools, rng), botched=kind)
    if kind == "missing_required":
        victim = rng.choice(required)
        dropped = {k: v for k, v in arguments.items() if k != victim}
        return replace(call, arguments=dumps(dropped), botched=kind)
    props = object_schema(tool.parameters).get("properties") or {}
    unused = [(k, v) for k, v in _INVENTED if k not in props and k not in arguments]
    name, value = rng.choice(unused) if unused else ("extra_argument_x", 1)
    return replace(call, arguments=dumps({**arguments, name: value}), botched=kind)


def _malform(text: str, rng: random.Random) -> str:
    """Truncated JSON, a missing closing brace, or a missing closing quote: never parseable."""
    how = rng.randrange(3)
    if how == 0:
        broken = text[: rng.randint(1, max(1, len(text) - 1))]
    elif how == 1 or '"' not in text:
        broken = text[:-1]  # drop the closing brace
    else:
        i = text.rindex('"')  # the last quote always closes a string: the string never ends
        broken = text[:i] + text[i + 1 :]
    try:
        json.loads(broken)
    except ValueError:
        return broken
    return text[:-1] or "{"  # pragma: no cover - belt and braces


def _wrong_name(name: str, tools: Sequence[ToolSpec], rng: random.Random) -> str:
    """A plausible name that no tool has: a near-synonym verb, or a stray suffix."""
    taken = {t.name for t in tools}
    head, sep, rest = name.partition("_")
    candidates = [f"{_NAME_SWAPS[head]}{sep}{rest}"] if head in _NAME_SWAPS else []
    candidates += [name + suffix for suffix in _NAME_SUFFIXES]
    candidates = [c for c in candidates if c not in taken and c != name]
    guess = rng.choice(candidates) if candidates else name + "_v2"
    while guess in taken:
        guess += "_v2"
    return guess
