"""Chat Completions wire format: the response body and the ``chat.completion.chunk`` stream.

Streaming chunks are pre-encoded: each token's event is a constant prefix, the token's text as a
JSON string, and a constant suffix; nothing else is re-encoded per token.

Reasoning comes first and is hidden (counted in usage only), as OpenAI's hosted models do. A
model configured with ``raw_reasoning`` (``[behavior.MODEL]``) shows it the way vLLM serves
gpt-oss and other open reasoning models: ``message.reasoning`` (and the older name
``reasoning_content``) in a body, one ``delta.reasoning`` (and ``delta.reasoning_content``)
chunk per reasoning token in a stream, before the content.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from fastmode.backends.mockmodel import REASONING, Piece, ToolCall
from fastmode.backends.mockmodel.request import CUSTOM
from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols.base import Encoder
from fastmode.gateway.protocols.events import CHUNK, CHUNK_HEADS, WIRE, Frames, Merged, chunk_head
from fastmode.gateway.protocols.vocabulary import OPENAI_SERVICE_TIERS
from fastmode.gateway.values.job import Job

FINGERPRINT = "fp_fastmode"
DONE = b"[DONE]"


def chat_usage(job: Job) -> dict[str, Any]:
    """Usage of a finished reply: reasoning tokens are part of ``completion_tokens`` (billed as
    output) and counted again in ``completion_tokens_details.reasoning_tokens``."""
    out = job.gen.output_tokens
    return {
        "prompt_tokens": job.prompt_tokens,
        "completion_tokens": out,
        "total_tokens": job.prompt_tokens + out,
        "prompt_tokens_details": {"cached_tokens": job.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": job.gen.reasoning_tokens,
                                      "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
        "cost_usd": job.usage_cost(),
    }


def _call_wire(call: ToolCall) -> dict[str, Any]:
    """A tool call in a message: a function's ``function: {name, arguments}``, a custom
    tool's ``custom: {name, input}``."""
    if call.kind == CUSTOM:
        return {"id": call.id, "type": "custom", "custom": {"name": call.name,
                                                            "input": call.arguments}}
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


class ChatEncoder(Encoder):
    named_events = False
    opening_at_first_token = True

    def __init__(self, job: Job, include_usage: bool) -> None:
        self.job = job
        self.include_usage = include_usage
        self.meta = {
            "id": job.id.replace("req-", "chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": job.created,
            "model": job.model,
            "service_tier": OPENAI_SERVICE_TIERS.label(job.role),
            "system_fingerprint": FINGERPRINT,
        }
        self.head = orjson.dumps(self.meta)[:-1] + b',"choices":[{"index":0,"delta":'
        tail = b',"logprobs":null,"finish_reason":null}]'
        if include_usage:
            tail += b',"usage":null'
        self.tail = tail + b"}"
        self.content_prefix = self.head + b'{"content":'
        self.content_suffix = b"}" + self.tail
        self.raw = job.tier.behavior.raw_reasoning  # show the reasoning (vLLM's fields)
        self._started_tools: set[int] = set()

    # -- non-streaming ----------------------------------------------------------------------

    def body(self) -> dict[str, Any]:
        job, gen = self.job, self.job.gen
        calls = [_call_wire(c) for c in gen.tool_calls] or None
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else gen.text,
                                   "refusal": None, "tool_calls": calls, "annotations": []}
        if self.raw:
            thought = gen.reasoning.text if gen.reasoning is not None else None
            message["reasoning"] = message["reasoning_content"] = thought
        return {
            "id": self.meta["id"],
            "object": "chat.completion",
            "created": job.created,
            "model": job.model,
            "service_tier": self.meta["service_tier"],
            "system_fingerprint": FINGERPRINT,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": gen.finish_reason,
            }],
            "usage": chat_usage(job),
            "time_info": job.time_info(),
            **({"kv_transfer_params": job.kv_transfer_params} if job.kv_transfer_asked else {}),
        }

    # -- streaming ------------------------------------------------------------------------

    def opening(self) -> Frames:
        return [("", self.head + b'{"role":"assistant","content":"","refusal":null}' + self.tail)]

    def tokens(self, start: int, count: int) -> Frames:
        if self.sse_wire:  # text chunks as their SSE bytes (gateway.protocols.events.WIRE)
            kind, cp, cs = WIRE, self.wire_prefix("", self.content_prefix), self.content_suffix \
                + b"\n\n"
        else:
            kind, cp, cs = "", self.content_prefix, self.content_suffix
        # ... or as their HTTP chunks, size line and all, in one join (events.CHUNK)
        chunk, size, crlf, join = self.chunk_wire, len(cp) + len(cs), cs + b"\r\n", b"".join
        dumps = orjson.dumps
        out: Frames = []
        # reasoning comes first: hidden (only counted in usage) unless the model shows it raw
        first = start if self.raw else max(start, self.job.gen.reasoning_tokens)
        marks = self.marks
        items: Iterable[tuple[int, Piece | Merged]]
        if self.interval <= 1:  # an event per token: the pieces as they are, at C speed
            pieces = self.job.gen.pieces
            last = min(start + count, len(pieces))
            items = zip(range(first, last), pieces[first:last], strict=True)
        else:  # grouped (``pieces`` records the marks itself)
            items, marks = self.pieces(first, start + count, out), None
        for i, piece in items:
            if marks is not None:  # where this token's event begins (``events.EventBuffer``)
                marks.append((i, len(out)))
            if piece.tool == REASONING:  # (an upstream's reply learns its reasoning as it goes)
                if self.raw:
                    text = dumps(piece.text)
                    out.append(("", self.head + b'{"reasoning":' + text
                                + b',"reasoning_content":' + text + b"}" + self.tail))
            elif piece.tool < 0:
                if chunk:
                    text = dumps(piece.text)
                    n = size + len(text)
                    out.append((CHUNK, join((CHUNK_HEADS[n] if n < 4096 else chunk_head(n), cp,
                                             text, crlf))))
                else:
                    out.append((kind, cp + dumps(piece.text) + cs))
            else:
                out.append(("", self._tool_delta(piece.tool, piece.text)))
        return out

    def _tool_delta(self, k: int, fragment: str) -> bytes:
        item: dict[str, Any]
        call = self.job.gen.tool_calls[k]
        custom = call.kind == CUSTOM
        field, text = ("custom", "input") if custom else ("function", "arguments")
        if k not in self._started_tools:
            self._started_tools.add(k)
            item = {"index": k, "id": call.id, "type": field,
                    field: {"name": call.name, text: fragment}}
        else:
            item = {"index": k, field: {text: fragment}}
        return self.head + orjson.dumps({"tool_calls": [item]}) + self.tail

    def closing(self) -> Frames:
        job = self.job
        last = {
            **self.meta,
            "choices": [{"index": 0, "delta": {}, "logprobs": None,
                         "finish_reason": job.gen.finish_reason}],
            **({"usage": None} if self.include_usage else {}),
            "time_info": job.time_info(),
        }
        out: Frames = [("", orjson.dumps(last))]
        if self.include_usage:
            out.append(("", orjson.dumps({**self.meta, "choices": [], "usage": chat_usage(job)})))
        out.append(("", DONE))
        return out

    def failed(self, error: APIError) -> Frames:
        """OpenAI's in-stream error: ``data: {"error": {...}}``, which the SDK raises."""
        return [("", orjson.dumps(error.body()))]
