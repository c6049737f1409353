"""Chat Completions' tools as the mock model's ``ToolSpec``s: functions and custom tools.

A custom tool (``{"type": "custom", "custom": {"name", "description", "format"}}``) takes
freeform text, optionally constrained by a Lark or regex grammar (``format: {"type":
"grammar", "grammar": {"syntax", "definition"}}``); the model calls it with a tool call of
type ``custom`` (``custom: {name, input}``). Each 400 names its place in the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from fastmode.backends.mockmodel import ToolSpec
from fastmode.backends.mockmodel.request import CUSTOM
from fastmode.gateway.protocols.base import Lenient, validate
from fastmode.gateway.protocols.openai_chat.schema import ChatTool
from fastmode.gateway.protocols.openai_responses.tools import tool_type


class Grammar(Lenient):
    syntax: Literal["lark", "regex"]
    definition: str


class GrammarFormat(Lenient):
    type: Literal["grammar"]
    grammar: Grammar


class CustomDef(Lenient):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    format: dict[str, Any] | None = None  # {type: text} | GrammarFormat


class ChatCustomTool(Lenient):
    type: Literal["custom"]
    custom: CustomDef


def chat_tools(tools: Sequence[Any]) -> tuple[list[dict[str, Any]], tuple[ToolSpec, ...],
                                              list[tuple[ToolSpec, bool, str]]]:
    """(the tools as counted in the prompt, their specs, the strict checks: spec, strict,
    param)."""
    raw: list[dict[str, Any]] = []
    specs: list[ToolSpec] = []
    strict: list[tuple[ToolSpec, bool, str]] = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if tool_type(tool, at, ("function", "custom")) == "function":
            fn: ChatTool = validate(ChatTool, tool, at)
            wire = fn.model_dump(exclude_none=True)
            spec = ToolSpec.from_wire(wire)
            strict.append((spec, bool(fn.function.strict), f"{at}.function.parameters"))
        else:
            custom: ChatCustomTool = validate(ChatCustomTool, tool, at)
            wire = tool
            fmt = custom.custom.format
            grammar = ""
            if fmt is not None and tool_type(fmt, f"{at}.custom.format",
                                             ("text", "grammar")) == "grammar":
                grammar = validate(GrammarFormat, fmt, f"{at}.custom.format").grammar.definition
            spec = ToolSpec(custom.custom.name, custom.custom.description or "", {}, CUSTOM,
                            grammar=grammar)
        raw.append(wire)
        specs.append(spec)
    return raw, tuple(specs), strict
