"""Anthropic Messages API (``POST /v1/messages``), including its fast mode, as a protocol plug-in.

Fast mode is Anthropic's name for the same model on a low-batch pool: ``"speed": "fast"`` in the
body with the beta header ``anthropic-beta: fast-mode-2026-02-01`` (or any request on
``/fast/v1/messages``) routes to the fast tier, and ``usage.speed`` says which speed served it.
Errors use Anthropic's body, ``{"type": "error", "error": {"type", "message"}, "request_id"}``,
and overload is 529 ``overloaded_error`` (which the anthropic SDK retries).
"""

from __future__ import annotations

from typing import Any

import orjson

from fastmode.backends.mockmodel import GenerationRequest, ResponseFormat, ToolSpec
from fastmode.backends.tokenizer import count_chat_prompt
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.protocols.anthropic_messages.encoder import (
    MessagesEncoder,
    anthropic_status,
    error_body,
)
from fastmode.gateway.protocols.anthropic_messages.schema import MessagesRequest
from fastmode.gateway.protocols.base import Protocol, RequestContext, resolve_tool_choice
from fastmode.gateway.protocols.formats import strict_tools, structured
from fastmode.gateway.protocols.sealed import thinking_is_ours
from fastmode.gateway.protocols.vocabulary import ANTHROPIC_SPEEDS
from fastmode.gateway.values.caching import messages_prefix
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest

__all__ = ["FAST_BETA", "MessagesEncoder", "MessagesProtocol", "MessagesRequest"]

FAST_BETA = "fast-mode-2026-02-01"
SYSTEM_TURNS_BETA = "mid-conversation-system-2026-04-07"  # role "system" inside ``messages``


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def chat_messages(req: MessagesRequest) -> list[dict[str, Any]]:
    """Anthropic messages as chat messages, which the tokenizer and the mock model read."""
    out: list[dict[str, Any]] = []
    if req.system:
        out.append({"role": "system", "content": _text(req.system)})
    for i, m in enumerate(req.messages):
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        for j, block in enumerate(m.content):
            if block.get("type") == "thinking" and not thinking_is_ours(block):
                raise bad_request(f"messages.{i}.content.{j}: Invalid `signature` in "
                                  "`thinking` block.", param=f"messages[{i}].content[{j}]")
        text = [b for b in m.content if b.get("type") == "text"]
        uses = [b for b in m.content if b.get("type") == "tool_use"]
        results = [b for b in m.content if b.get("type") == "tool_result"]
        for r in results:
            out.append({"role": "tool", "tool_call_id": r.get("tool_use_id", ""),
                        "content": _text(r.get("content", ""))})
        if uses:
            out.append({"role": "assistant", "content": _text(text) or None, "tool_calls": [
                {"id": u.get("id", ""), "type": "function", "function": {
                    "name": u.get("name", ""),
                    "arguments": orjson.dumps(u.get("input", {})).decode()}}
                for u in uses
            ]})
        elif text or not results:
            out.append({"role": m.role, "content": _text(text)})
    return out


class MessagesProtocol(Protocol):
    name = "messages"
    schema = MessagesRequest
    vocabulary = ANTHROPIC_SPEEDS
    limit_prefix = "x-ratelimit-"  # Anthropic's are anthropic-ratelimit-* / anthropic-fast-*

    def translate(self, req: MessagesRequest, ctx: RequestContext) -> TurnRequest:
        beta = FAST_BETA in ctx.headers.get("anthropic-beta", "")
        if req.speed not in (None, "standard") and not beta:
            raise bad_request(
                f"speed: {req.speed!r} requires the beta header 'anthropic-beta: {FAST_BETA}'.",
                param="speed",
            )
        if SYSTEM_TURNS_BETA not in ctx.headers.get("anthropic-beta", ""):
            for i, m in enumerate(req.messages):
                if m.role == "system":
                    raise bad_request(
                        f"messages.{i}.role: a system turn inside `messages` requires the beta "
                        f"header 'anthropic-beta: {SYSTEM_TURNS_BETA}'; otherwise put it in the "
                        "top-level `system` parameter.", param=f"messages[{i}].role")
        messages = chat_messages(req)
        specs = tuple(
            ToolSpec(t.name, t.description or "", t.input_schema) for t in req.tools or []
        )
        strict_tools((spec, bool(t.strict), f"tools[{i}].input_schema")
                     for i, (spec, t) in enumerate(zip(specs, req.tools or [], strict=True)))
        effort, budget = thinking(req)
        choice = req.tool_choice
        literal = None if choice is None else {"any": "required"}.get(choice.type, choice.type)
        tool_choice = resolve_tool_choice(
            {s.name for s in specs},
            None if literal == "tool" else literal,
            (choice.name or "") if choice is not None and choice.type == "tool" else None,
        )
        tools_wire = [t.model_dump(exclude_none=True) for t in req.tools or []]
        gen = GenerationRequest(
            messages=messages,
            stop=tuple(req.stop_sequences or ()),
            seed=req.seed,
            temperature=1.0 if req.temperature is None else req.temperature,
            tools=specs,
            tool_choice=tool_choice,
            response_format=output_format(req),
            effort=effort,
            thinking_budget=budget,
            parallel_tool_calls=not (choice is not None and choice.disable_parallel_tool_use),
        )
        key = ctx.headers.get("x-api-key")
        role = self.vocabulary.role_of(req.speed, ctx.fast_path)
        prompt = count_chat_prompt(messages, tools_wire or None)
        return TurnRequest(
            model=req.model,
            role=role,
            generation=gen,
            prompt_tokens=prompt,
            max_tokens=req.max_tokens,
            stream=req.stream,
            authorization=f"Bearer {key}" if key else ctx.headers.get("authorization"),
            messages=messages,
            own_count=True,
            prefix=messages_prefix(req, role, prompt),  # cache_control breakpoints
            reasoning_param="thinking",
        )

    def encoder(self, job: Job, req: MessagesRequest, turn: TurnRequest) -> MessagesEncoder:
        omit = req.thinking is not None and req.thinking.display == "omitted"
        return MessagesEncoder(job, omit_thinking=omit)

    def error_body(self, error: APIError, request_id: str) -> dict[str, Any]:
        return error_body(error, request_id.replace("req-", "req_"))

    def id_headers(self, request_id: str) -> dict[str, str]:
        return {"request-id": request_id.replace("req-", "req_"), "x-request-id": request_id}

    def status(self, error: APIError) -> int:
        return anthropic_status(error)


def thinking(req: MessagesRequest) -> tuple[str | None, int | None]:
    """(effort, budget) of a request's ``thinking``, with Anthropic's checks: a budget of at
    least 1,024 tokens and below ``max_tokens``, and temperature 1 while thinking. Without
    ``thinking`` (or with it disabled) the model does not think."""
    cfg = req.thinking
    if cfg is None or cfg.type in ("disabled", "between_tools"):
        return "none", None
    if req.temperature is not None and req.temperature != 1:
        raise bad_request("`temperature` may only be set to 1 when thinking is enabled.",
                          param="temperature")
    if cfg.type == "adaptive":
        effort = req.output_config.effort if req.output_config is not None else None
        return effort or "high", None  # Anthropic's default effort is high
    if cfg.budget_tokens is None:
        raise bad_request("thinking.budget_tokens: Field required", param="thinking.budget_tokens")
    if cfg.budget_tokens < 1024:
        raise bad_request("thinking.enabled.budget_tokens: Input should be greater than or "
                          "equal to 1024", param="thinking.budget_tokens")
    if cfg.budget_tokens >= req.max_tokens:
        raise bad_request("`max_tokens` must be greater than `thinking.budget_tokens`.",
                          param="max_tokens")
    return None, cfg.budget_tokens


def output_format(req: MessagesRequest) -> ResponseFormat | None:
    """``output_config.format`` (or the beta ``output_format``) as a ``ResponseFormat``."""
    fmt = req.output_config.format if req.output_config is not None else None
    param = "output_config.format.schema"
    if fmt is None and req.output_format is not None:
        fmt, param = req.output_format, "output_format.schema"
    if fmt is None:
        return None
    return structured("json_schema", fmt.schema_, "output", False, "output_format", param)
