"""OpenAI Chat Completions (``POST /v1/chat/completions``) as a protocol plug-in."""

from __future__ import annotations

from typing import Any

from fastmode.backends.mockmodel import GenerationRequest, ResponseFormat, ToolSpec, message_text
from fastmode.backends.tokenizer import count_chat_prompt
from fastmode.gateway.errors import bad_request
from fastmode.gateway.protocols.base import Protocol, RequestContext, resolve_tool_choice
from fastmode.gateway.protocols.formats import (
    json_word_required,
    mentions_json,
    strict_tools,
    structured,
)
from fastmode.gateway.protocols.images import check_images
from fastmode.gateway.protocols.openai_chat.encoder import ChatEncoder, chat_usage
from fastmode.gateway.protocols.openai_chat.schema import (
    ChatRequest,
    NamedCustomChoice,
    NamedToolChoice,
)
from fastmode.gateway.protocols.openai_chat.tools import chat_tools
from fastmode.gateway.stored.stored_chat import StoredChats, check_metadata
from fastmode.gateway.values.caching import chat_prefix
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest

__all__ = ["ChatEncoder", "ChatProtocol", "ChatRequest", "chat_usage"]


class ChatProtocol(Protocol):
    name = "chat"
    schema = ChatRequest

    def translate(self, req: ChatRequest, ctx: RequestContext) -> TurnRequest:
        if req.n is not None and req.n > 1:
            raise bad_request("n: only n=1 is supported by fastmode.", param="n",
                              code="invalid_value")
        if req.logprobs:
            raise bad_request("logprobs are not supported by fastmode.", param="logprobs",
                              code="invalid_value")
        if req.stream_options is not None and not req.stream:
            raise bad_request(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                param="stream_options",
            )
        check_metadata(req.metadata)
        messages = [m.model_dump(exclude_none=True) for m in req.messages]
        check_images(messages, "messages")  # image_url parts: checked, never fetched
        tools: list[dict[str, Any]] = []
        specs: tuple[ToolSpec, ...] = ()
        if req.tools:  # (most requests have none: nothing to dump, convert or check)
            tools, specs, strict = chat_tools(req.tools)
            strict_tools(strict)
        choice = req.tool_choice
        tool_choice = resolve_tool_choice(
            {s.name for s in specs},
            choice if isinstance(choice, str) or choice is None else None,
            choice.function.name if isinstance(choice, NamedToolChoice) else
            choice.custom.name if isinstance(choice, NamedCustomChoice) else None,
        )
        stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        gen = GenerationRequest(
            messages=messages,
            stop=stop,
            seed=req.seed,
            temperature=1.0 if req.temperature is None else req.temperature,
            tools=specs,
            tool_choice=tool_choice,
            ignore_eos=req.ignore_eos,
            response_format=chat_format(req, messages),
            effort=req.reasoning_effort,
            parallel_tool_calls=req.parallel_tool_calls is not False,
        )
        cap = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        prompt = count_chat_prompt(messages, tools or None)
        return TurnRequest(
            model=req.model,
            role=self.vocabulary.role_of(req.service_tier, ctx.fast_path),
            generation=gen,
            prompt_tokens=prompt,
            max_tokens=cap,
            stream=req.stream,
            authorization=ctx.headers.get("authorization"),
            messages=messages,
            prefix=chat_prefix(messages, tools, prompt, req.model, req.prompt_cache_key,
                               req.prompt_cache_retention),
            kv_transfer=req.kv_transfer_params,
            dp_rank=ctx.headers.get("x-data-parallel-rank"),
        )

    def encoder(self, job: Job, req: ChatRequest, turn: TurnRequest) -> ChatEncoder:
        include = bool(req.stream and req.stream_options and req.stream_options.include_usage)
        return ChatEncoder(job, include)

    def completed(self, job: Job, req: ChatRequest, encoder: Any, turn: TurnRequest,
                  ctx: RequestContext) -> None:
        """``store: true``: keep the completion for the stored-completions endpoints, as the
        request's key owns it (the pipeline authenticated the key already)."""
        if req.store:
            StoredChats(ctx.store.state, ctx.store.caller).keep(
                encoder.body(), turn.messages, req.metadata or {})


def chat_format(req: ChatRequest, messages: list[dict[str, Any]]) -> ResponseFormat | None:
    """``response_format`` as the mock model's ``ResponseFormat`` (400s as OpenAI's)."""
    rf = req.response_format
    if rf is None:
        return None
    if rf.type == "json_object" and not mentions_json(message_text(m) for m in messages):
        raise json_word_required("messages", "response_format")
    spec = rf.json_schema
    if rf.type == "json_schema" and spec is None:
        raise bad_request("Missing required parameter: 'response_format.json_schema'.",
                          param="response_format.json_schema",
                          code="missing_required_parameter")
    name = spec.name if spec is not None else ""
    return structured(rf.type, spec.schema_ if spec is not None else None, name,
                      bool(spec and spec.strict), f"response_format '{name}'",
                      "response_format.json_schema.schema")
