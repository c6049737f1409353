"""Responses API request body, validated by pydantic at the edge."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, field_validator
from pydantic_core import PydanticCustomError

from fastmode.gateway.protocols.base import Lenient
from fastmode.gateway.protocols.openai_chat.schema import Effort, ServiceTier

CONVERSATIONS_REFUSED = (
    "conversations are not supported by this server; continue a conversation with "
    "previous_response_id (responses are stored by default) or send the whole history in "
    "input")


class ResponsesToolChoice(Lenient):
    type: Literal["function", "custom"]
    name: str


class TextFormat(Lenient):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: StrictBool | None = None


class TextConfig(Lenient):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(Lenient):
    effort: Effort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None  # deprecated name


class ResponsesRequest(Lenient):
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    stream: StrictBool = False
    max_output_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    tools: list[Any] | None = None  # every tool type the API defines (``.tools``)
    tool_choice: Literal["none", "auto", "required"] | ResponsesToolChoice | None = None
    previous_response_id: str | None = None
    store: StrictBool | None = None
    service_tier: ServiceTier | None = None
    seed: StrictInt | None = None  # not in OpenAI's Responses API; accepted for reproducible tests
    metadata: dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    ignore_eos: StrictBool = False
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    include: list[str] | None = Field(None, max_length=16)
    prompt_cache_key: str | None = Field(None, max_length=1024)  # routing hint (gateway.caching)
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    # accepted and echoed in the response object (the mock model does not sample with them)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_tool_calls: int | None = Field(None, ge=0)  # caps built-in tools: fastmode has none
    safety_identifier: str | None = Field(None, max_length=64)
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    # false: warm the prompt's prefix and complete at once with no output (a client's warm-up)
    generate: StrictBool | None = None
    # run detached, polled with GET /v1/responses/{id} (gateway.background)
    background: StrictBool | None = None
    # the Conversations API is not served: refused, never silently ignored (gateway.conversations)
    conversation: Any = None

    @field_validator("conversation")
    @classmethod
    def _no_conversations(cls, value: Any) -> Any:
        if value is not None:
            raise PydanticCustomError("unsupported", CONVERSATIONS_REFUSED)
        return value
