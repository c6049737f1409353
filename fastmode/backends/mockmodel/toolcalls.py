"""Tool calls: whether to call, which tools, and arguments that fit their schemas.

The model calls a tool when forced or required, or in ``auto`` mode right after a user turn;
after a tool result it answers in text, so an agent loop always terminates. The tool is the
forced one, else the one sharing most words with the user's message; its arguments are
generated from its JSON schema (``schema_values``, ``pattern`` and ``format`` included),
echoing the user where a property asks for a place or a query.

Parallel calls: with several tools offered and ``parallel_tool_calls`` not false (and no forced
tool), a seeded share of turns (``ModelBehavior.parallel_tool_share``) calls two or more
different tools at once, the best-matching first; each call has its own id and arguments.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from typing import Any

from fastmode.backends.mockmodel.behavior import DEFAULT_BEHAVIOR, ModelBehavior
from fastmode.backends.mockmodel.request import CUSTOM, GenerationRequest, ToolCall, ToolSpec
from fastmode.backends.mockmodel.schema_values import generate_value
from fastmode.backends.mockmodel.streams import Streams

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


def make_calls(
    req: GenerationRequest, streams: Streams, user_text: str,
    behavior: ModelBehavior = DEFAULT_BEHAVIOR,
) -> list[tuple[ToolCall, dict[str, Any], ToolSpec]]:
    """Well-formed calls, each with the arguments it carries (parsed) and the tool it calls:
    one, or (a seeded share of turns) several calls to different tools at once."""
    ranked = rank_tools(req, streams("tool"), user_text)
    count = 1
    if (req.parallel_tool_calls and len(req.tools) > 1 and req.tool_choice in ("auto", "required")
            and behavior.max_parallel_tools > 1):
        rng = streams("parallel")
        if rng.random() < behavior.parallel_tool_share:
            count = rng.randint(2, min(len(ranked), behavior.max_parallel_tools))
    return [_call(tool, streams, user_text, k) for k, tool in enumerate(ranked[:count])]


def _call(tool: ToolSpec, streams: Streams, user_text: str,
          k: int) -> tuple[ToolCall, dict[str, Any], ToolSpec]:
    suffix = f"/{k}" if k else ""  # call 0 keeps the streams a single call always used
    if tool.kind == CUSTOM:  # freeform input: the task's own words (no JSON to generate)
        text = " ".join(user_text.split())[:200] or tool.name
        call = ToolCall(call_id(streams("call_id" + suffix)), tool.name, text, kind=CUSTOM,
                        namespace=tool.namespace)
        return call, {}, tool
    params = object_schema(tool.parameters)
    arguments = generate_value(params, streams("arguments" + suffix), context=user_text)
    if not isinstance(arguments, dict):
        arguments = {}
    call = ToolCall(call_id(streams("call_id" + suffix)), tool.name, dumps(arguments),
                    namespace=tool.namespace)
    return call, arguments, tool


def rank_tools(req: GenerationRequest, rng: random.Random, user_text: str) -> list[ToolSpec]:
    """The forced tool alone; else every tool, most words shared with the user first (ties in
    a seeded order)."""
    if req.tool_choice not in ("auto", "required", "none"):
        for tool in req.tools:
            if tool.name == req.tool_choice:
                return [tool]
        raise ValueError(f"tool_choice names an unknown tool: {req.tool_choice!r}")
    wanted = _words(user_text)
    scores = [len(wanted & (_words(t.name) | _words(t.description))) for t in req.tools]
    best = max(scores)
    candidates = [t for t, s in zip(req.tools, scores, strict=True) if s == best]
    first = rng.choice(candidates)
    rest = [t for t in req.tools if t is not first]
    rng.shuffle(rest)
    score = {id(t): sc for t, sc in zip(req.tools, scores, strict=True)}
    rest.sort(key=lambda t: -score[id(t)])
    return [first, *rest]


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
