"""Anthropic Messages API (``POST /v1/messages``), including its fast mode.

Fast mode is Anthropic's name for the same model on a low-batch pool: ``"speed": "fast"`` in the
body with the beta header ``anthropic-beta: fast-mode-2026-02-01`` (or any request on
``/fast/v1/messages``) routes to the fast tier, and ``usage.speed`` says which speed served it.
Errors use Anthropic's body, ``{"type": "error", "error": {"type", "message"}, "request_id"}``,
and overload is 529 ``overloaded_error`` (which the anthropic SDK retries).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import orjson
from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.responses import Response, StreamingResponse

from backends.textgen import GenerationRequest, ToolSpec
from backends.tokenizer import count_chat_prompt

from .errors import APIError, bad_request
from .schemas import parse_json, resolve_tool_choice, validate
from .service import Gateway, Job, new_id

FAST_BETA = "fast-mode-2026-02-01"
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class AnthropicTool(Lenient):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]


class AnthropicToolChoice(Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class AnthropicMessage(Lenient):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class MessagesRequest(Lenient):
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stream: StrictBool = False
    temperature: float | None = Field(None, ge=0, le=1)
    stop_sequences: list[str] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    speed: Literal["standard", "fast"] | None = None
    metadata: dict[str, Any] | None = None


def error_response(exc: APIError, request_id: str) -> Response:
    status = 529 if exc.status == 503 else exc.status
    body = {
        "type": "error",
        "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": exc.message},
        "request_id": request_id,
    }
    headers = {**exc.headers, "request-id": request_id}
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def chat_messages(req: MessagesRequest) -> list[dict[str, Any]]:
    """Anthropic messages as chat messages, which the tokenizer and the mock model read."""
    out: list[dict[str, Any]] = []
    if req.system:
        out.append({"role": "system", "content": _text(req.system)})
    for m in req.messages:
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
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


def normalise(req: MessagesRequest, fast_beta: bool) -> tuple[GenerationRequest, int, bool]:
    if req.speed == "fast" and not fast_beta:
        raise bad_request(
            f"speed: 'fast' requires the beta header 'anthropic-beta: {FAST_BETA}'.",
            param="speed",
        )
    messages = chat_messages(req)
    specs = tuple(
        ToolSpec(t.name, t.description or "", t.input_schema) for t in req.tools or []
    )
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
        temperature=1.0 if req.temperature is None else req.temperature,
        tools=specs,
        tool_choice=tool_choice,
    )
    prompt = count_chat_prompt(messages, tools_wire or None)
    return gen, prompt, req.speed == "fast"


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


class MessageEncoder:
    """One job's Anthropic body or SSE events (``event:`` lines are mandatory here)."""

    def __init__(self, job: Job, req: MessagesRequest, fast: bool) -> None:
        self.job = job
        self.req = req
        self.mid = job.id.replace("req-", "msg_")
        self.speed = "fast" if job.tier.name == "fast" else "standard"
        self.tool_ids = [f"toolu_{c.id[5:]}" for c in job.gen.tool_calls]
        self._open: int | None = None
        text_prefix = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        self._text_prefix = text_prefix + b'"delta":{"type":"text_delta","text":'

    def usage(self, output: int) -> dict[str, Any]:
        job = self.job
        return {
            "input_tokens": job.prompt_tokens - job.cached_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": job.cached_tokens,
            "output_tokens": output,
            "service_tier": "standard",
            "speed": self.speed,
            "cost_usd": job.usage_cost(output),
        }

    def content(self) -> list[dict[str, Any]]:
        gen = self.job.gen
        if gen.tool_calls:
            return [
                {"type": "tool_use", "id": self.tool_ids[k], "name": c.name,
                 "input": _tool_input(c.arguments)}
                for k, c in enumerate(gen.tool_calls)
            ]
        return [{"type": "text", "text": gen.text}]

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
    def _event(kind: str, body: dict[str, Any]) -> bytes:
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"

    def start(self) -> bytes:
        message = {
            "id": self.mid, "type": "message", "role": "assistant", "model": self.job.model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": self.usage(1),
        }
        return self._event("message_start", {"type": "message_start", "message": message})

    def tokens(self, start: int, count: int) -> bytes:
        out = bytearray()
        gen = self.job.gen
        for i in range(start, min(start + count, len(gen.pieces))):
            piece = gen.pieces[i]
            index = max(piece.tool, 0)
            if self._open != index:
                out += self._switch(index)
            if piece.tool < 0:
                out += self._text_prefix + orjson.dumps(piece.text) + b"}}\n\n"
            else:
                out += self._event("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece.text}})
        return bytes(out)

    def _switch(self, index: int) -> bytes:
        out = b""
        if self._open is not None:
            out += self._event("content_block_stop",
                               {"type": "content_block_stop", "index": self._open})
        self._open = index
        gen = self.job.gen
        if gen.tool_calls:
            block = {"type": "tool_use", "id": self.tool_ids[index],
                     "name": gen.tool_calls[index].name, "input": {}}
        else:
            block = {"type": "text", "text": ""}
        return out + self._event("content_block_start", {
            "type": "content_block_start", "index": index, "content_block": block})

    def finish(self) -> bytes:
        out = b""
        if self._open is None:
            out += self._switch(0)
        out += self._event("content_block_stop", {"type": "content_block_stop",
                                                  "index": self._open})
        reason, seq = _stop(self.job)
        out += self._event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": seq},
            "usage": self.usage(self.job.gen.output_tokens),
            "time_info": self.job.time_info(),
        })
        return out + self._event("message_stop", {"type": "message_stop"})


def add_routes(app: FastAPI, gateway: Gateway, prefix: str, fast_path: bool) -> None:
    from .app import _wait_finished  # shared disconnect-aware wait

    @app.post(prefix + "/messages")
    async def messages(request: Request) -> Response:
        started = time.perf_counter()
        request_id = new_id("req").replace("req-", "req_")
        try:
            body = parse_json(await request.body())
            req: MessagesRequest = validate(MessagesRequest, body)
            beta = FAST_BETA in request.headers.get("anthropic-beta", "")
            gen, prompt, want_fast = normalise(req, beta)
            request.app.state.remote.refuse(req.model, fast_path or want_fast,
                                            api="The Anthropic Messages API")
            key = request.headers.get("x-api-key")
            auth = f"Bearer {key}" if key else request.headers.get("authorization")
            job = gateway.admit(
                model=req.model, fast=fast_path or want_fast, request=gen,
                prompt_tokens=prompt, max_tokens=req.max_tokens, authorization=auth,
            )
        except APIError as exc:
            return error_response(exc, request_id)
        headers = {
            "request-id": request_id,
            "x-fastmode-tier": job.tier.name,
            "x-request-id": job.id,
            "openai-processing-ms": str(int((time.perf_counter() - started) * 1000)),
            **job.headers,
        }
        encoder = MessageEncoder(job, req, want_fast)
        if not req.stream:
            ok = await _wait_finished(job, request)
            gateway.settle(job, 200)
            if not ok:
                return Response(status_code=499)
            headers["x-fastmode-cost-usd"] = f"{job.cost_usd:.8f}"
            return Response(orjson.dumps(encoder.body()), headers=headers,
                            media_type="application/json")

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield encoder.start()
                async for start, times in job.tokens():
                    yield encoder.tokens(start, len(times))
                gateway.settle(job, 200)
                yield encoder.finish()
            finally:
                gateway.settle(job, 200)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", **headers})
