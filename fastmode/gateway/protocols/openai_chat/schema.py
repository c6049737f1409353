"""Chat Completions request body, validated by pydantic at the edge."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr, field_validator

from fastmode.gateway.protocols.base import Lenient

# any string: the protocol's vocabulary (gateway.protocols.vocabulary) says which words exist
ServiceTier = StrictStr
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class FunctionDef(Lenient):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: StrictBool | None = None


class ChatTool(Lenient):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(Lenient):
    name: str


class NamedToolChoice(Lenient):
    type: Literal["function"]
    function: NamedFunction


class NamedCustomChoice(Lenient):
    type: Literal["custom"]
    custom: NamedFunction


class JSONSchemaSpec(Lenient):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaSpec | None = None


class StreamOptions(Lenient):
    include_usage: StrictBool = False
    include_obfuscation: StrictBool = False


class ChatMessage(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ChatRequest(Lenient):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    max_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    seed: StrictInt | None = None
    stop: str | list[str] | None = None
    n: StrictInt | None = Field(None, ge=1, le=128)
    tools: list[dict[str, Any]] | None = None  # ChatTool | a custom tool (``.tools``)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | NamedCustomChoice | \
        None = None
    parallel_tool_calls: StrictBool | None = None
    service_tier: ServiceTier | None = None
    logprobs: StrictBool | None = None
    user: str | None = None
    ignore_eos: StrictBool = False  # vLLM's extension: produce exactly max_tokens (benchmarks)
    response_format: ResponseFormat | None = None
    reasoning_effort: Effort | None = None
    prompt_cache_key: str | None = Field(None, max_length=1024)  # routing hint (gateway.caching)
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    store: StrictBool | None = None  # keep the completion (gateway.stored_chat)
    metadata: dict[str, str] | None = None  # kept with it (16 pairs at most: checked there)
    kv_transfer_params: dict[str, Any] | None = None  # vLLM's P/D exchange (an engine's)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v
