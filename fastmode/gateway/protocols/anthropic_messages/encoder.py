"""Anthropic Messages wire format: the message body and its streaming events."""

from __future__ import annotations

from typing import Any

import orjson

from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols.base import Encoder
from fastmode.gateway.protocols.events import WIRE, Frames
from fastmode.gateway.protocols.sealed import thinking_signature
from fastmode.gateway.protocols.vocabulary import ANTHROPIC_SPEEDS
from fastmode.gateway.values.job import Job

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    431: "request_too_large",
    500: "api_error",
    529: "overloaded_error",
}


OVERLOAD_CODES = (None, "server_is_overloaded")


def anthropic_status(error: APIError) -> int:
    """Anthropic answers overload with 529 (which its SDK retries), not 503; other 503s (an
    injected ``503`` fault, a shutdown) stay 503."""
    return 529 if error.status == 503 and error.code in OVERLOAD_CODES else error.status


def error_body(error: APIError, request_id: str) -> dict[str, Any]:
    status = anthropic_status(error)
    return {
        "type": "error",
        "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": error.message},
        "request_id": request_id,
    }


def _tool_input(arguments: str) -> dict[str, Any]:
    """A tool_use block's input must be an object; a botched (malformed) call yields {}."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _stop(job: Job) -> tuple[str, str | None]:
    if job.gen.stop_sequence is not None:
        return "stop_sequence", job.gen.stop_sequence
    return STOP_REASONS.get(job.gen.finish_reason, "end_turn"), None


class MessagesEncoder(Encoder):
    """One job's Anthropic body or SSE events (``event:`` lines are mandatory here)."""

    def __init__(self, job: Job, omit_thinking: bool = False) -> None:
        self.job = job
        self.mid = job.id.replace("req-", "msg_")
        self.speed = ANTHROPIC_SPEEDS.label(job.role)  # the speed that served
        self._open: int | None = None
        self.omit_thinking = omit_thinking  # thinking.display "omitted": only the signature
        self._thinking_done = False
        self._thinking_sent = 0  # reasoning tokens whose events went out
        # an upstream's reply (gateway.remote) learns its reasoning as it streams: its thinking
        # block closes with the first content, not with a last reasoning token
        self.open_ended = bool(getattr(job.gen, "live", False))
        self._layout()
        self._thinking_prefix = (b'{"type":"content_block_delta","index":0,"delta":'
                                 b'{"type":"thinking_delta","thinking":')

    def _layout(self) -> None:
        """A reply that thought first starts with a thinking block: the others follow it."""
        self.thought = self.job.gen.reasoning_tokens
        self.off = 1 if self.thought else 0
        self._text_prefix = (b'{"type":"content_block_delta","index":' + str(self.off).encode()
                             + b',"delta":{"type":"text_delta","text":')

    def _tool_id(self, k: int) -> str:
        """Derived when first needed: a remote tier's reply (gateway.remote) learns its tool
        calls while it streams."""
        return f"toolu_{self.job.gen.tool_calls[k].id[5:]}"

    def usage(self, output: int) -> dict[str, Any]:
        job = self.job
        written, long = job.cache_write_tokens, job.cache_write_long_tokens
        return {
            "input_tokens": job.prompt_tokens - job.cached_tokens - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": job.cached_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": written - long,
                               "ephemeral_1h_input_tokens": long},
            "output_tokens": output,
            "output_tokens_details": {"thinking_tokens": min(output, self.thought)},
            "service_tier": "standard",
            "speed": self.speed,
            "cost_usd": job.usage_cost(output),
        }

    def content(self) -> list[dict[str, Any]]:
        gen = self.job.gen
        out = [self._thinking_block(final=True)] if self.thought else []
        if gen.tool_calls:
            return out + [
                {"type": "tool_use", "id": self._tool_id(k), "name": c.name,
                 "input": _tool_input(c.arguments)}
                for k, c in enumerate(gen.tool_calls)
            ]
        if self.thought and gen.output_tokens == self.thought:
            return out  # the thinking used the whole max_tokens: no text block
        return out + [{"type": "text", "text": gen.text}]

    def _thinking_block(self, final: bool) -> dict[str, Any]:
        reasoning = self.job.gen.reasoning
        text = reasoning.text if reasoning is not None else ""
        shown = "" if self.omit_thinking else text
        if not final:
            return {"type": "thinking", "thinking": "", "signature": ""}
        return {"type": "thinking", "thinking": shown,
                "signature": thinking_signature(text, self.thought, self.omit_thinking)}

    def body(self) -> dict[str, Any]:
        reason, seq = _stop(self.job)
        return {
            "id": self.mid,
            "type": "message",
            "role": "assistant",
            "model": self.job.model,
            "content": self.content(),
            "stop_reason": reason,
            "stop_sequence": seq,
            "usage": self.usage(self.job.gen.output_tokens),
            "time_info": self.job.time_info(),
        }

    @staticmethod
    def _event(kind: str, body: dict[str, Any]) -> tuple[str, bytes]:
        return kind, orjson.dumps(body)

    def opening(self) -> Frames:
        """``message_start``. Its usage carries the reply's final cost: the SDK keeps the
        message_start usage and only updates token counts from ``message_delta``, so the cost
        it shows at the end is the one sent here (the whole reply is known at admission)."""
        usage = self.usage(1)
        usage["cost_usd"] = self.job.usage_cost()
        message: dict[str, Any] = {
            "id": self.mid, "type": "message", "role": "assistant", "model": self.job.model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage,
        }
        return [self._event("message_start", {"type": "message_start", "message": message})]

    def tokens(self, start: int, count: int) -> Frames:
        out: Frames = []
        if self.thought != self.job.gen.reasoning_tokens and self._open is None:
            self._layout()  # an upstream's reasoning grew
        thought, off, prefix, dumps = self.thought, self.off, self._text_prefix, orjson.dumps
        kind, suffix = "content_block_delta", b"}}"
        if self.sse_wire:  # text deltas as their SSE bytes (gateway.protocols.events.WIRE)
            kind, prefix, suffix = WIRE, self.wire_prefix(kind, prefix), b"}}\n\n"
        for i, piece in self.pieces(start, start + count, out):
            if i < thought:
                out += self._thinking(i, piece.text)
                continue
            if thought and not self._thinking_done:
                out += self._end_thinking()  # an upstream's reasoning ends with its content
            tool = piece.tool
            index = off + tool if tool > 0 else off
            if self._open != index:
                out += self._switch(index)
            if tool < 0:
                out.append((kind, prefix + dumps(piece.text) + suffix))
            else:
                out.append(self._event("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece.text}}))
        return out

    def _thinking(self, i: int, text: str) -> Frames:
        """Reasoning token ``i``: the thinking block opens with the first, each one is a
        ``thinking_delta`` (none when the display is omitted), and the last is followed by the
        ``signature_delta`` and the block's stop."""
        out: Frames = []
        if i == 0:
            out.append(self._event("content_block_start", {
                "type": "content_block_start", "index": 0,
                "content_block": self._thinking_block(final=False)}))
        if not self.omit_thinking:
            out.append(("content_block_delta", self._thinking_prefix + orjson.dumps(text)
                        + b"}}"))
        self._thinking_sent = i + 1
        if i == self.thought - 1 and not self.open_ended:
            out += self._end_thinking()
        return out

    def _end_thinking(self) -> Frames:
        self._thinking_done = True
        block = self._thinking_block(final=True)
        return [
            self._event("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "signature_delta", "signature": block["signature"]}}),
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ]

    def _switch(self, index: int) -> Frames:
        out: Frames = []
        if self._open is not None:
            out.append(self._event("content_block_stop",
                                   {"type": "content_block_stop", "index": self._open}))
        self._open = index
        gen = self.job.gen
        k = index - self.off
        block: dict[str, Any]
        if gen.tool_calls:
            block = {"type": "tool_use", "id": self._tool_id(k),
                     "name": gen.tool_calls[k].name, "input": {}}
        else:
            block = {"type": "text", "text": ""}
        out.append(self._event("content_block_start", {
            "type": "content_block_start", "index": index, "content_block": block}))
        return out

    def closing(self) -> Frames:
        out: Frames = []
        if self.thought and not self._thinking_done:  # not streamed to its end: the rest
            for i in range(self._thinking_sent, self.thought):
                out += self._thinking(i, self.job.gen.pieces[i].text)
            if not self._thinking_done:
                out += self._end_thinking()
        if self._open is None and (not self.thought
                                   or self.job.gen.output_tokens > self.thought):
            out += self._switch(self.off)
        if self._open is not None:
            out.append(self._event("content_block_stop", {"type": "content_block_stop",
                                                          "index": self._open}))
        reason, seq = _stop(self.job)
        out.append(self._event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": seq},
            "usage": self.usage(self.job.gen.output_tokens),
            "time_info": self.job.time_info(),
        }))
        out.append(self._event("message_stop", {"type": "message_stop"}))
        return out

    def failed(self, error: APIError) -> Frames:
        """Anthropic's in-stream error event, which the SDK raises."""
        return [self._event("error", error_body(error, self.job.id.replace("req-", "req_")))]
