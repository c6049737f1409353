"""Request bodies of the OpenAI endpoints, validated by pydantic at the edge.

Unknown fields are accepted and ignored (SDKs add new ones faster than mocks follow), but every
field we read is checked, and a failure names it in ``param`` as OpenAI does.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from .errors import APIError, bad_request

ServiceTier = Literal["auto", "default", "flex", "scale", "priority", "fast"]


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionDef(Lenient):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ChatTool(Lenient):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(Lenient):
    name: str


class NamedToolChoice(Lenient):
    type: Literal["function"]
    function: NamedFunction


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
    max_completion_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = Field(None, ge=1, le=128)
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    service_tier: ServiceTier | None = None
    logprobs: StrictBool | None = None
    user: str | None = None
    ignore_eos: StrictBool = False  # vLLM's extension: produce exactly max_tokens (benchmarks)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v


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


def resolve_tool_choice(
    names: set[str], literal: str | None, forced: str | None, param: str = "tool_choice"
) -> str:
    """The generator's tool choice from a request's: ``none`` | ``auto`` | ``required`` | a name.

    ``literal`` is the string form (None when absent), ``forced`` the name of a named choice.
    Shared by the Chat, Responses and Messages front ends, which only differ in wire shape.
    """
    if forced is not None:
        if forced not in names:
            raise bad_request(
                f"Invalid value for '{param}': no function named '{forced}' was given in 'tools'.",
                param=param,
            )
        return forced
    if literal is None:
        return "auto" if names else "none"
    if literal == "required" and not names:
        raise bad_request(f"Invalid value for '{param}': 'required' needs 'tools'.", param=param)
    return literal


def parse_json(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise bad_request("The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(
            f"We could not parse the JSON body of your request ({exc}). The OpenAI API "
            "expects a JSON payload."
        ) from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body


def validate(model: type[BaseModel], body: dict[str, Any]) -> Any:
    """Validate ``body`` or raise a 400 naming the first offending field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = _param([p for p in err["loc"] if isinstance(p, int) or _FIELD.match(p)])
        if err["type"] == "missing":
            msg = f"Missing required parameter: '{param}'."
        elif err["type"] == "extra_forbidden":
            msg = f"Unrecognized request argument supplied: {param}"
        else:
            msg = f"Invalid value for '{param}': {err['msg']}."
        raise APIError(400, msg, param=param, code=_code(err["type"])) from None


_FIELD = re.compile(r"^(?!(str|int|float|bool|list|dict|none)$)[a-z_][a-z0-9_]*$")


def _param(loc: list[Any]) -> str:
    out = ""
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "body"


def _code(kind: str) -> str:
    if kind == "missing":
        return "missing_required_parameter"
    if kind in ("extra_forbidden",):
        return "unknown_parameter"
    return "invalid_value"
