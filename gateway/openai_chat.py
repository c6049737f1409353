"""OpenAI Chat Completions: request -> normalised generation request, reply -> wire format.

Streaming chunks are pre-encoded: each token's SSE event is a constant prefix, the token's text
as a JSON string, and a constant suffix; nothing else is re-encoded per token.
"""

from __future__ import annotations

from typing import Any

import orjson

from backends.textgen import GenerationRequest, ToolSpec
from backends.tokenizer import count_chat_prompt

from .errors import bad_request
from .schemas import ChatRequest, NamedToolChoice, resolve_tool_choice
from .service import FAST_SERVICE_TIERS, Job, service_tier_label

FINGERPRINT = "fp_fastmode"
DONE = b"data: [DONE]\n\n"


def normalise(req: ChatRequest) -> tuple[GenerationRequest, int, int | None, bool]:
    """Returns the generation request, prompt tokens, the requested cap, and whether fast."""
    if req.n is not None and req.n > 1:
        raise bad_request("n: only n=1 is supported by fastmode.", param="n", code="invalid_value")
    if req.logprobs:
        raise bad_request("logprobs are not supported by fastmode.", param="logprobs",
                          code="invalid_value")
    if req.stream_options is not None and not req.stream:
        raise bad_request(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )
    messages = [m.model_dump(exclude_none=True) for m in req.messages]
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
    specs = tuple(ToolSpec.from_wire(t) for t in tools)
    choice = req.tool_choice
    named = isinstance(choice, NamedToolChoice)
    tool_choice = resolve_tool_choice(
        {s.name for s in specs},
        None if named else choice,
        choice.function.name if named else None,
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
    )
    prompt = count_chat_prompt(messages, tools or None)
    cap = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    fast = req.service_tier in FAST_SERVICE_TIERS
    return gen, prompt, cap, fast


def _tool_calls(job: Job) -> list[dict[str, Any]] | None:
    if not job.gen.tool_calls:
        return None
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in job.gen.tool_calls
    ]


def completion_body(job: Job, usage: dict[str, Any]) -> dict[str, Any]:
    gen = job.gen
    return {
        "id": job.id.replace("req-", "chatcmpl-"),
        "object": "chat.completion",
        "created": job.created,
        "model": job.model,
        "service_tier": service_tier_label(job.tier.name),
        "system_fingerprint": FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None if gen.tool_calls else gen.text,
                    "refusal": None,
                    "tool_calls": _tool_calls(job),
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": gen.finish_reason,
            }
        ],
        "usage": usage,
        "time_info": job.time_info(),
    }


class ChatStream:
    """Encodes one job's chunks. ``encode(start, count)`` returns the bytes of tokens
    ``start .. start+count`` in one buffer, so a batch of late tokens is a single write."""

    def __init__(self, job: Job, include_usage: bool) -> None:
        self.job = job
        self.include_usage = include_usage
        self.meta = {
            "id": job.id.replace("req-", "chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": job.created,
            "model": job.model,
            "service_tier": service_tier_label(job.tier.name),
            "system_fingerprint": FINGERPRINT,
        }
        head = orjson.dumps(self.meta)[:-1]
        self.head = b"data: " + head + b',"choices":[{"index":0,"delta":'
        tail = b',"logprobs":null,"finish_reason":null}]'
        if include_usage:
            tail += b',"usage":null'
        self.tail = tail + b"}\n\n"
        self.content_prefix = self.head + b'{"content":'
        self.content_suffix = b"}" + self.tail
        self._started_tools: set[int] = set()

    def role_chunk(self) -> bytes:
        return self.head + b'{"role":"assistant","content":"","refusal":null}' + self.tail

    def encode(self, start: int, count: int) -> bytes:
        pieces = self.job.gen.pieces
        out = bytearray()
        if start == 0:
            out += self.role_chunk()
        cp, cs, dumps = self.content_prefix, self.content_suffix, orjson.dumps
        for i in range(start, min(start + count, len(pieces))):
            piece = pieces[i]
            if piece.tool < 0:
                out += cp
                out += dumps(piece.text)
                out += cs
            else:
                out += self._tool_delta(piece.tool, piece.text)
        return bytes(out)

    def _tool_delta(self, k: int, fragment: str) -> bytes:
        if k not in self._started_tools:
            self._started_tools.add(k)
            call = self.job.gen.tool_calls[k]
            item = {
                "index": k,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": fragment},
            }
        else:
            item = {"index": k, "function": {"arguments": fragment}}
        return self.head + orjson.dumps({"tool_calls": [item]}) + self.tail

    def finish(self, usage: dict[str, Any] | None) -> bytes:
        job = self.job
        body = orjson.dumps(
            {
                **self.meta,
                "choices": [
                    {"index": 0, "delta": {}, "logprobs": None,
                     "finish_reason": job.gen.finish_reason}
                ],
                **({"usage": None} if self.include_usage else {}),
                "time_info": job.time_info(),
            }
        )
        out = b"data: " + body + b"\n\n"
        if self.include_usage and usage is not None:
            out += b"data: " + orjson.dumps(
                {
                    **self.meta,
                    "choices": [],
                    "usage": usage,
                }
            ) + b"\n\n"
        return out + DONE
