"""Responses API request body, validated by pydantic at the edge."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool

from ..base import Lenient
from ..openai_chat.schema import ServiceTier


class ResponsesTool(Lenient):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class ResponsesToolChoice(Lenient):
    type: Literal["function"]
    name: str


class ResponsesRequest(Lenient):
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    stream: StrictBool = False
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    tools: list[ResponsesTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ResponsesToolChoice | None = None
    previous_response_id: str | None = None
    store: StrictBool | None = None
    service_tier: ServiceTier | None = None
    seed: int | None = None  # not in OpenAI's Responses API; accepted for reproducible tests
    metadata: dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    ignore_eos: StrictBool = False
