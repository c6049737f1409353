"""Anthropic Messages request body, validated by pydantic at the edge."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr

from fastmode.gateway.protocols.base import Lenient


class AnthropicTool(Lenient):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    strict: StrictBool | None = None


class AnthropicToolChoice(Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: StrictBool | None = None


class ThinkingConfig(Lenient):
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: StrictInt | None = Field(None, ge=1)
    display: Literal["summarized", "omitted"] | None = None


class OutputFormat(Lenient):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(Lenient):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class AnthropicMessage(Lenient):
    # "system": a system turn inside the conversation (the mid-conversation-system beta)
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class MessagesRequest(Lenient):
    model: str
    max_tokens: StrictInt = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stream: StrictBool = False
    temperature: float | None = Field(None, ge=0, le=1)
    stop_sequences: list[str] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    speed: StrictStr | None = None  # checked by the vocabulary (protocols.vocabulary)
    metadata: dict[str, Any] | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    output_format: OutputFormat | None = None  # the structured-outputs beta's spelling
    seed: int | None = None  # not in Anthropic's API; accepted for reproducible tests
