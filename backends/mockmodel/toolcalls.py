"""Tool calls: whether to call one, which tool, and arguments that fit its schema.

The model calls a tool when forced or required, or in ``auto`` mode right after a user turn;
after a tool result it answers in text, so an agent loop always terminates. The tool is the
forced one, else the one sharing most words with the user's message; its arguments are
generated from its JSON schema (``schema_values``), echoing the user where a property asks for a
place or a query.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from typing import Any

from .request import GenerationRequest, ToolCall, ToolSpec
from .schema_values import generate_value
from .streams import Streams

_STOPWORDS = frozenset(
    "a an and are as at be by can do for from get give how i in is it me my of on or please "
    "show tell that the this to use what when where which who with you your".split()
)


def wants_tool(req: GenerationRequest, last_role: str) -> bool:
    """Call a tool when forced/required, or in auto mode right after a user turn.

    After a tool result the model answers in text, so an agent loop always terminates.
    """
    if not req.tools or req.tool_choice == "none":
        return False
    if req.tool_choice == "auto":
        return last_role == "user"
    return True  # "required" or a forced tool name


def make_call(
    req: GenerationRequest, streams: Streams, user_text: str
) -> tuple[ToolCall, dict[str, Any], ToolSpec]:
    """A well-formed call, the arguments it carries (parsed) and the tool it calls."""
    tool = pick_tool(req, streams("tool"), user_text)
    params = object_schema(tool.parameters)
    arguments = generate_value(params, streams("arguments"), context=user_text)
    if not isinstance(arguments, dict):
        arguments = {}
    call = ToolCall(call_id(streams("call_id")), tool.name, dumps(arguments))
    return call, arguments, tool


def pick_tool(req: GenerationRequest, rng: random.Random, user_text: str) -> ToolSpec:
    """The forced tool, else the one sharing most words with the user, else a random one."""
    if req.tool_choice not in ("auto", "required", "none"):
        for tool in req.tools:
            if tool.name == req.tool_choice:
                return tool
        raise ValueError(f"tool_choice names an unknown tool: {req.tool_choice!r}")
    wanted = _words(user_text)
    scores = [len(wanted & (_words(t.name) | _words(t.description))) for t in req.tools]
    best = max(scores)
    candidates = [t for t, s in zip(req.tools, scores, strict=True) if s == best]
    return rng.choice(candidates)


def _words(text: str) -> set[str]:
    """Lower-case content words; snake_case and camelCase names are split into words."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return {w for w in re.findall(r"[a-z0-9]+", spaced.lower()) if w not in _STOPWORDS}


def object_schema(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """Tool parameters are always an object, even when the definition leaves ``type`` out."""
    return params if "type" in params else {"type": "object", **params}


def call_id(rng: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "call_" + "".join(rng.choice(alphabet) for _ in range(24))


def dumps(value: Any) -> str:
    """Compact JSON, as models emit arguments."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
