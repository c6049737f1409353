"""``POST /v1/responses/compact``: a conversation compacted into one sealed item, as a turn.

OpenAI's compaction returns the *compacted window*: every user message of the conversation
(the request's ``input`` after the ``previous_response_id`` response's, if any) as it was, then
one ``compaction`` item whose ``encrypted_content`` stands for everything else (assistant
messages, tool calls and outputs, reasoning). A later ``POST /v1/responses`` (SSE or websocket)
takes the window as ``input``, and the compaction item costs the tokens of its summary instead
of those of the items it replaced: that is what compaction saves.

The compaction pass is a turn like any other (the one pipeline, ``gateway.pipeline.turn``): the key's
limits, the tier's engine (it prefills the conversation and decodes the summary: its latency
and its price are modeled), faults, the ledger. The summary is ``SUMMARY_SHARE`` of the
compacted items' tokens, between ``SUMMARY_MIN`` and ``SUMMARY_MAX`` tokens (fastmode's
modeling choice: OpenAI does not publish one), written by the mock model without reasoning.
The item is sealed (``gateway.protocols.sealed``) with the id of the key that made it: it is
that key's alone (another key's request is a 400 ``invalid_encrypted_content``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from fastmode.backends.mockmodel import GenerationRequest
from fastmode.backends.tokenizer import REPLY_PRIMING, count_chat_prompt
from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols.base import Encoder, Lenient, Protocol, RequestContext
from fastmode.gateway.protocols.events import Frames
from fastmode.gateway.protocols.openai_chat.schema import ServiceTier
from fastmode.gateway.protocols.openai_responses.encoder import responses_usage
from fastmode.gateway.protocols.openai_responses.items import (
    answered_calls,
    continued,
    input_messages,
    pending_calls,
)
from fastmode.gateway.protocols.sealed import compaction_content
from fastmode.gateway.values.caching import chat_units, openai_prefix
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest

SUMMARY_SHARE = 0.2
SUMMARY_MIN = 32
SUMMARY_MAX = 4096


class CompactRequest(Lenient):
    model: str
    input: str | list[dict[str, Any]] | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    prompt_cache_key: str | None = Field(None, max_length=1024)
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: ServiceTier | None = None


def summary_tokens(compacted: list[dict[str, Any]]) -> int:
    """The summary's length for items of this many tokens (see the module docstring)."""
    tokens = count_chat_prompt(compacted) - REPLY_PRIMING if compacted else 0
    return max(SUMMARY_MIN, min(SUMMARY_MAX, round(SUMMARY_SHARE * tokens)))


class CompactProtocol(Protocol):
    name = "compact"
    schema = CompactRequest

    def translate(self, req: CompactRequest, ctx: RequestContext) -> TurnRequest:
        conversation = input_messages(None, req.input or [],
                                      lambda o: ctx.store.caller.may_see(o))
        cached = 0
        if req.previous_response_id:
            prev = continued(ctx.store, req.previous_response_id)
            conversation = prev.messages + conversation
            cached = prev.context_tokens
        answered_calls(conversation)
        prompt_messages = ([{"role": "system", "content": req.instructions}]
                           if req.instructions else []) + conversation
        prompt = count_chat_prompt(prompt_messages)
        gen = GenerationRequest(messages=prompt_messages, ignore_eos=True, effort="none")
        return TurnRequest(
            model=req.model,
            role=self.vocabulary.role_of(req.service_tier, ctx.fast_path),
            generation=gen,
            prompt_tokens=prompt,
            max_tokens=summary_tokens([m for m in conversation if m.get("role") != "user"]),
            stream=False,
            authorization=ctx.headers.get("authorization"),
            cached_tokens=min(cached, prompt - 1),
            messages=conversation,
            reasoning_param="reasoning.effort",
            prefix=openai_prefix(chat_units(prompt_messages, None), req.model,
                                 req.prompt_cache_key, req.prompt_cache_retention, prompt),
        )

    def encoder(self, job: Job, req: CompactRequest, turn: TurnRequest) -> CompactEncoder:
        return CompactEncoder(job, turn)


def _window_item(message: dict[str, Any], item_id: str) -> dict[str, Any]:
    """A user message of the conversation as an item of the compacted window."""
    content = message.get("content")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else (
        list(content) if isinstance(content, list) else [])
    return {"id": item_id, "type": "message", "status": "completed", "role": "user",
            "content": parts}


class CompactEncoder(Encoder):
    """The ``response.compaction`` object (compaction is never streamed)."""

    def __init__(self, job: Job, turn: TurnRequest) -> None:
        self.job = job
        self.turn = turn
        self.rid = job.id.replace("req-", "resp_")

    def tokens(self, start: int, count: int) -> Frames:
        return []

    def closing(self) -> Frames:
        return []

    def failed(self, error: APIError) -> Frames:
        return []

    def body(self) -> dict[str, Any]:
        job = self.job
        suffix = self.rid.removeprefix("resp_")
        users = [m for m in self.turn.messages if m.get("role") == "user"]
        window = [_window_item(m, f"msg_{suffix}_{k}") for k, m in enumerate(users)]
        item_id = f"cmp_{suffix}"
        owner = job.principal.id if job.principal is not None else None
        sealed = compaction_content(item_id, job.gen.text, owner,
                                    pending_calls(self.turn.messages))
        window.append({"id": item_id, "type": "compaction", "encrypted_content": sealed})
        return {"id": self.rid, "object": "response.compaction", "created_at": job.created,
                "output": window, "usage": responses_usage(job)}
