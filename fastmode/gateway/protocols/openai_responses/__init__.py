"""OpenAI Responses API (``POST /v1/responses``, SSE and websocket) as a protocol plug-in.

Input items become chat messages (``items``); ``previous_response_id`` prepends a stored conversation whose
tokens are already in the KV cache (billed as cached input, no prefill time).
"""

from __future__ import annotations

from typing import Any

from fastmode.backends.mockmodel import GenerationRequest, ResponseFormat, message_text
from fastmode.backends.tokenizer import count_chat_prompt
from fastmode.gateway.errors import bad_request
from fastmode.gateway.protocols.base import (
    Protocol,
    RequestContext,
    resolve_tool_choice,
    tool_call_messages,
)
from fastmode.gateway.protocols.formats import (
    json_word_required,
    mentions_json,
    strict_tools,
    structured,
)
from fastmode.gateway.protocols.openai_responses.encoder import ResponsesEncoder, responses_usage
from fastmode.gateway.protocols.openai_responses.items import (
    answered_calls,
    continued,
    input_messages,
)
from fastmode.gateway.protocols.openai_responses.schema import ResponsesRequest, ResponsesToolChoice
from fastmode.gateway.protocols.openai_responses.tools import carried_tools, declared, tool_groups
from fastmode.gateway.stored.response_body import stored_body
from fastmode.gateway.stored.response_store import StoredResponse
from fastmode.gateway.values.caching import chat_prefix
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest

__all__ = ["ResponsesEncoder", "ResponsesProtocol", "ResponsesRequest", "responses_usage"]


class ResponsesProtocol(Protocol):
    name = "responses"
    schema = ResponsesRequest

    def translate(self, req: ResponsesRequest, ctx: RequestContext) -> TurnRequest:
        messages = input_messages(req.instructions, req.input, lambda o: ctx.store.caller.may_see(o))
        cached = 0
        groups = tool_groups(req.tools, req.input)
        if req.previous_response_id:
            prev = continued(ctx.store, req.previous_response_id)
            messages = prev.messages + messages
            cached = prev.context_tokens
            if prev.tools and not carried_tools(req.input):
                groups.append((prev.tools, "previous_response_id"))
        answered_calls(messages)
        tools = declared(groups)
        specs = tools.specs
        choice = req.tool_choice
        tool_choice = resolve_tool_choice(
            {s.name for s in specs},
            None if isinstance(choice, ResponsesToolChoice) else choice,
            choice.name if isinstance(choice, ResponsesToolChoice) else None,
        )
        gen = GenerationRequest(
            messages=messages,
            seed=req.seed,
            temperature=1.0 if req.temperature is None else req.temperature,
            tools=specs,
            tool_choice=tool_choice,
            ignore_eos=req.ignore_eos,
            response_format=text_format(req, messages),
            effort=req.reasoning.effort if req.reasoning else None,
            summary=(req.reasoning.summary or req.reasoning.generate_summary)
            if req.reasoning else None,
            parallel_tool_calls=req.parallel_tool_calls is not False,
        )
        strict_tools(tools.strict)
        raw = list(tools.raw)
        prompt = count_chat_prompt(messages, raw or None)
        return TurnRequest(
            model=req.model,
            role=self.vocabulary.role_of(req.service_tier, ctx.fast_path),
            generation=gen,
            prompt_tokens=prompt,
            max_tokens=req.max_output_tokens,
            stream=req.stream,
            authorization=ctx.headers.get("authorization"),
            cached_tokens=min(cached, prompt - 1),
            messages=messages,
            reasoning_param="reasoning.effort",
            generate=req.generate is not False,
            prefix=chat_prefix(messages, raw, prompt, req.model, req.prompt_cache_key,
                               req.prompt_cache_retention),
        )

    def encoder(self, job: Job, req: ResponsesRequest, turn: TurnRequest) -> ResponsesEncoder:
        return ResponsesEncoder(job, req)

    def completed(self, job: Job, req: ResponsesRequest, encoder: Any, turn: TurnRequest,
                  ctx: RequestContext) -> None:
        """Keep the conversation, the reply included, for a later ``previous_response_id``."""
        gen = job.gen
        reply = (tool_call_messages(gen.tool_calls) if gen.tool_calls
                 else {"role": "assistant", "content": gen.text})
        carried = carried_tools(req.input)
        if not carried and req.previous_response_id:
            carried = continued(ctx.store, req.previous_response_id).tools
        item = StoredResponse(encoder.rid, job.model, turn.messages + [reply],
                              job.prompt_tokens + gen.output_tokens,
                              body=stored_body(encoder.response("completed"), req),
                              tools=carried)
        ctx.store.remember(item, persist=req.store is not False)


def text_format(req: ResponsesRequest, messages: list[dict[str, Any]]) -> ResponseFormat | None:
    """``text.format`` as the mock model's ``ResponseFormat`` (400s as OpenAI's)."""
    fmt = req.text.format if req.text is not None else None
    if fmt is None:
        return None
    if fmt.type == "json_object" and not mentions_json(message_text(m) for m in messages):
        raise json_word_required("input", "text.format")
    if fmt.type == "json_schema" and not fmt.name:
        raise bad_request("Missing required parameter: 'text.format.name'.",
                          param="text.format.name", code="missing_required_parameter")
    return structured(fmt.type, fmt.schema_, fmt.name or "", bool(fmt.strict),
                      f"text.format '{fmt.name}'", "text.format.schema")
