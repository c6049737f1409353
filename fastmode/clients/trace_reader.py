"""Replay traces: one JSON request per line, so users can replay their own traffic.

Each line is an object with

- ``offset`` (seconds from the start of the run, >= 0; alias ``arrival``): when to send it;
  optional when the trace is replayed closed loop (``--concurrency``), where order alone counts;
- ``messages`` (a non-empty list of chat messages) or ``prompt_tokens`` (a positive integer:
  a prompt of about that many tokens is generated);
- ``max_tokens`` (positive integer): the output length; sent with ``ignore_eos`` so it is exact;
- ``tier`` (optional, default ``standard``): a tier name known to ``--tier`` / the defaults;
- ``tools`` (optional): a list of OpenAI chat tool definitions; requests with tools are sent
  with ``tool_choice: "required"`` unless ``tool_choice`` is given.

Blank lines and lines starting with ``#`` are skipped. A bad line stops the load with a
``TraceError`` naming the file, the line number and the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from fastmode.clients.workload import TOOL_MIN_MAX_TOKENS, PromptBuilder, RequestSpec

KNOWN_FIELDS = frozenset(
    {"offset", "arrival", "messages", "prompt_tokens", "max_tokens", "tier", "tools",
     "tool_choice"}
)


class TraceError(ValueError):
    """A trace line is invalid; the message names the file, line number and field."""


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: must be a positive integer, got {value!r}")
    return value


def parse_line(
    obj: Any, prompts: PromptBuilder, tiers: Iterable[str] | None, need_offset: bool
) -> RequestSpec:
    """One decoded line -> a ``RequestSpec``; raises ``ValueError`` naming the field."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - KNOWN_FIELDS)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}; allowed: {', '.join(sorted(KNOWN_FIELDS))}")
    offset = obj.get("offset", obj.get("arrival"))
    if offset is None:
        if need_offset:
            raise ValueError("offset: missing (seconds from the start; required in open loop)")
    elif isinstance(offset, bool) or not isinstance(offset, int | float) or not (
        offset >= 0 and math.isfinite(offset)
    ):
        raise ValueError(f"offset: must be a number >= 0, got {offset!r}")
    if "max_tokens" not in obj:
        raise ValueError("max_tokens: missing")
    max_tokens = _positive_int(obj["max_tokens"], "max_tokens")
    tier = obj.get("tier", "standard")
    if not isinstance(tier, str) or not tier:
        raise ValueError(f"tier: must be a non-empty string, got {tier!r}")
    known = list(tiers) if tiers is not None else None
    if known is not None and tier not in known:
        raise ValueError(f"tier: unknown {tier!r}; known: {', '.join(sorted(known))}")
    has_msgs, has_prompt = "messages" in obj, "prompt_tokens" in obj
    if has_msgs == has_prompt:
        raise ValueError("messages / prompt_tokens: give exactly one of the two")
    prompt_tokens: int | None = None
    if has_msgs:
        messages = obj["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages: must be a non-empty list")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ValueError(f"messages[{i}]: must be an object with a 'role'")
    else:
        prompt_tokens = _positive_int(obj["prompt_tokens"], "prompt_tokens")
        messages = prompts.messages(prompt_tokens)
    spec = RequestSpec(tier, messages, max_tokens, prompt_tokens, offset=offset)
    tools = obj.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise ValueError("tools: must be a list of tool objects")
        if tools:
            spec.tools = tools
            spec.ignore_eos = False
            spec.max_tokens = max(max_tokens, TOOL_MIN_MAX_TOKENS)
            spec.extra = {"tool_choice": obj.get("tool_choice", "required")}
    return spec


def read_trace(
    path: str | Path,
    tiers: Iterable[str] | None = None,
    need_offset: bool = True,
    seed: int = 1,
) -> list[RequestSpec]:
    """All requests of a JSONL trace, sorted by offset (stable for equal offsets)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    prompts = PromptBuilder(seed)
    known = list(tiers) if tiers is not None else None
    specs: list[RequestSpec] = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith(b"#"):
            continue
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise TraceError(f"{path} line {lineno}: not valid JSON ({exc})") from None
        try:
            specs.append(parse_line(obj, prompts, known, need_offset))
        except ValueError as exc:
            raise TraceError(f"{path} line {lineno}: {exc}") from None
    if not specs:
        raise TraceError(f"{path}: no requests in the trace")
    specs.sort(key=lambda s: s.offset or 0.0)
    return specs
