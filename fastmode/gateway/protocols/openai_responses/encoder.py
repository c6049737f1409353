"""Responses API wire format: the response object and its event sequence."""

from __future__ import annotations

from typing import Any

import orjson

from fastmode.backends.mockmodel.request import CUSTOM, FUNCTION
from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols.base import Encoder
from fastmode.gateway.protocols.events import WIRE, Frames
from fastmode.gateway.protocols.openai_responses.reasoning import ReasoningItem
from fastmode.gateway.protocols.openai_responses.schema import ResponsesRequest, ResponsesToolChoice
from fastmode.gateway.protocols.vocabulary import OPENAI_SERVICE_TIERS
from fastmode.gateway.values.job import Job

# the event that streams a call's arguments (a function's) or input (a custom tool's)
_DELTA = {FUNCTION: "response.function_call_arguments.delta",
          CUSTOM: "response.custom_tool_call_input.delta"}


def responses_usage(job: Job, output: int | None = None) -> dict[str, Any]:
    """Usage for ``output`` tokens (the whole reply by default); reasoning comes first, so of a
    partial reply the reasoning tokens are the first ones."""
    out = job.gen.output_tokens if output is None else output
    return {
        "input_tokens": job.prompt_tokens,
        # cache writes: those billed as such (OpenAI bills none, so 0 on OpenAI's routes)
        "input_tokens_details": {"cached_tokens": job.cached_tokens,
                                 "cache_write_tokens": job.cache_write_tokens},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": min(out, job.gen.reasoning_tokens)},
        "total_tokens": job.prompt_tokens + out,
        "cost_usd": job.usage_cost(out),
    }


class ResponsesEncoder(Encoder):
    """The event sequence of one response, as JSON bytes per event (with sequence numbers).

    The same events go out over SSE and the websocket."""

    def __init__(self, job: Job, req: ResponsesRequest) -> None:
        self.job = job
        self.req = req
        self.seq = 0
        self.rid = job.id.replace("req-", "resp_")
        self.msg_id = job.id.replace("req-", "msg_")
        self._text: list[str] = []
        self._args: dict[int, list[str]] = {}
        self._open_items: set[int] = set()
        self.reasoning: ReasoningItem | None = None
        self._layout()
        self._delta_mid = b',"logprobs":[],"sequence_number":'

    def _layout(self) -> None:
        """The first pieces are reasoning: a reply that thought has its reasoning item at
        output index 0, the message or the calls after it. An upstream's reply
        (gateway.remote) learns its reasoning as it streams: laid out again while it grows."""
        job = self.job
        self.thought = job.gen.reasoning_tokens
        self.base = 1 if self.thought else 0  # output index of the message / first call
        if self.thought and self.reasoning is None:
            encrypted = "reasoning.encrypted_content" in (self.req.include or ())
            self.reasoning = ReasoningItem(job.gen, job.id.replace("req-", "rs_"), encrypted,
                                           self._event, job.tier.behavior.raw_reasoning)
        if self.reasoning is not None:
            self.reasoning.tokens = self.thought
        prefix = orjson.dumps({
            "type": "response.output_text.delta",
            "item_id": self.msg_id,
            "output_index": self.base,
            "content_index": 0,
        })[:-1]
        self._delta_prefix = prefix + b',"delta":'

    def _fc_id(self, k: int) -> str:
        """Derived when first needed: a remote tier's reply (gateway.remote) learns its tool
        calls while it streams, and its usage only at the end."""
        call = self.job.gen.tool_calls[k]
        return ("ctc_" if call.kind == CUSTOM else "fc_") + call.id[5:]

    def _event(self, body: dict[str, Any]) -> bytes:
        body["sequence_number"] = self.seq
        self.seq += 1
        return orjson.dumps(body)

    # -- the response object ----------------------------------------------------------------

    def _message_item(self, status: str) -> dict[str, Any]:
        return {
            "id": self.msg_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": "".join(self._text) if status !=
                         "completed" else self.job.gen.text, "annotations": [], "logprobs": []}],
        }

    def _call_item(self, k: int, status: str) -> dict[str, Any]:
        call = self.job.gen.tool_calls[k]
        args = call.arguments if status == "completed" else "".join(self._args.get(k, []))
        custom = call.kind == CUSTOM
        item = {
            "id": self._fc_id(k),
            "type": "custom_tool_call" if custom else "function_call",
            "status": status,
            "call_id": call.id,
            "name": call.name,
            "input" if custom else "arguments": args,
        }
        if call.namespace:
            item["namespace"] = call.namespace
        return item

    def response(self, status: str) -> dict[str, Any]:
        job, req = self.job, self.req
        done = status == "completed"
        output: list[dict[str, Any]] = []
        if done or status == "incomplete":
            st = "completed" if done else "incomplete"
            if self.reasoning is not None and (done or self.reasoning.state):
                output.append(self.reasoning.item(done or self.reasoning.state == 2))
            if job.gen.tool_calls:
                output += [self._call_item(k, st) for k in range(len(job.gen.tool_calls))]
            elif self._shows_message(done):
                output.append(self._message_item(st))
        incomplete = None
        if job.gen.finish_reason == "length" and done:
            incomplete = {"reason": "max_output_tokens"}
        info = job.time_info() if done else None
        return {
            "id": self.rid,
            "object": "response",
            "created_at": job.created,
            # the modeled end of the reply (a number once completed, null before)
            "completed_at": job.created + round(info["total_time"])
            if info is not None and not incomplete else None,
            "status": "incomplete" if incomplete else status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": job.model,
            "output": output,
            "parallel_tool_calls": True if req.parallel_tool_calls is None else
            req.parallel_tool_calls,
            "previous_response_id": req.previous_response_id,
            "service_tier": OPENAI_SERVICE_TIERS.label(job.role),
            "store": True if req.store is None else req.store,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "text": _text_wire(req),
            "reasoning": self._reasoning_wire(),
            "tool_choice": _tool_choice_wire(req),
            "tools": [_tool_wire(t) for t in req.tools or []],
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "presence_penalty": req.presence_penalty or 0.0,
            "frequency_penalty": req.frequency_penalty or 0.0,
            "top_logprobs": req.top_logprobs or 0,
            "max_tool_calls": req.max_tool_calls,
            "background": bool(req.background),
            "safety_identifier": req.safety_identifier,
            "prompt_cache_key": req.prompt_cache_key,
            "prompt_cache_retention": req.prompt_cache_retention,
            "user": req.user,
            "truncation": req.truncation or "disabled",
            "usage": responses_usage(job) if done else None,
            "metadata": req.metadata or {},
            "time_info": info,
        }

    # -- the events -------------------------------------------------------------------------

    def opening(self) -> Frames:
        return [
            ("response.created", self._event({"type": "response.created", "response": self.response(
                "queued" if self.req.background else "in_progress")})),
            ("response.in_progress", self._event({"type": "response.in_progress",
                                                  "response": self.response("in_progress")})),
        ]

    def tokens(self, start: int, count: int) -> Frames:
        out: Frames = []
        if self.thought != self.job.gen.reasoning_tokens and not self._open_items:
            self._layout()  # an upstream's reasoning grew
        thought, base = self.thought, self.base
        kind, prefix, form = "response.output_text.delta", self._delta_prefix, b"%b%b%b%d}"
        if self.sse_wire:  # text deltas as their SSE bytes (gateway.protocols.events.WIRE)
            kind, prefix, form = WIRE, self.wire_prefix(kind, prefix), b"%b%b%b%d}\n\n"
        for i, piece in self.pieces(start, start + count, out):
            if i < thought:
                assert self.reasoning is not None
                out += self.reasoning.at(i, piece.text)
                continue
            if self.reasoning is not None and self.reasoning.state == 1:
                out += self.reasoning.finish()  # an upstream's reasoning ends with its content
            k = piece.tool
            if k < 0:
                if 0 not in self._open_items:
                    self._open_items.add(0)
                    out += self._open_message()
                self._text.append(piece.text)
                out.append((kind, form % (prefix, orjson.dumps(piece.text), self._delta_mid,
                                          self.seq)))
                self.seq += 1
            else:
                if k not in self._open_items:
                    self._open_items.add(k)
                    out.append(("response.output_item.added", self._event({
                        "type": "response.output_item.added", "output_index": base + k,
                        "item": self._call_item(k, "in_progress")})))
                self._args.setdefault(k, []).append(piece.text)
                delta = _DELTA[self.job.gen.tool_calls[k].kind]
                out.append((delta, self._event({
                    "type": delta, "item_id": self._fc_id(k), "output_index": base + k,
                    "delta": piece.text})))
        return out

    def _open_message(self) -> Frames:
        item = self._message_item("in_progress")
        item["content"] = []
        return [
            ("response.output_item.added", self._event({
                "type": "response.output_item.added", "output_index": self.base, "item": item})),
            ("response.content_part.added", self._event({
                "type": "response.content_part.added", "item_id": self.msg_id,
                "output_index": self.base, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})),
        ]

    def closing(self) -> Frames:
        gen = self.job.gen
        base = self.base
        out: Frames = self.reasoning.finish() if self.reasoning is not None else []
        if gen.tool_calls:
            for k in range(len(gen.tool_calls)):
                if k not in self._open_items:
                    out.append(("response.output_item.added", self._event({
                        "type": "response.output_item.added", "output_index": base + k,
                        "item": self._call_item(k, "in_progress")})))
                out.append(self._call_done(k, base + k))
                out.append(("response.output_item.done", self._event({
                    "type": "response.output_item.done", "output_index": base + k,
                    "item": self._call_item(k, "completed")})))
        elif self._shows_message(True):
            if 0 not in self._open_items:
                out += self._open_message()
            out.append(("response.output_text.done", self._event({
                "type": "response.output_text.done", "item_id": self.msg_id,
                "output_index": base, "content_index": 0, "text": gen.text, "logprobs": []})))
            out.append(("response.content_part.done", self._event({
                "type": "response.content_part.done", "item_id": self.msg_id,
                "output_index": base, "content_index": 0,
                "part": {"type": "output_text", "text": gen.text, "annotations": [],
                         "logprobs": []}})))
            out.append(("response.output_item.done", self._event({
                "type": "response.output_item.done", "output_index": base,
                "item": self._message_item("completed")})))
        resp = self.response("completed")
        kind = "response.incomplete" if resp["status"] == "incomplete" else "response.completed"
        out.append((kind, self._event({"type": kind, "response": resp})))
        return out

    def _call_done(self, k: int, index: int) -> tuple[str, bytes]:
        """The end of call k's arguments (a function's) or input (a custom tool's)."""
        call = self.job.gen.tool_calls[k]
        base = {"item_id": self._fc_id(k), "output_index": index}
        if call.kind == CUSTOM:
            kind = "response.custom_tool_call_input.done"
            return kind, self._event({"type": kind, **base, "input": call.arguments})
        kind = "response.function_call_arguments.done"
        return kind, self._event({"type": kind, **base, "name": call.name,
                                  "arguments": call.arguments})

    def _shows_message(self, done: bool) -> bool:
        """A reply whose reasoning used the whole cap has no message item (as OpenAI's), nor
        has a warm-up (``generate: false``)."""
        if self.req.generate is False:
            return False
        if not self.thought:
            return True
        return 0 in self._open_items or (done and self.job.gen.output_tokens > self.thought)

    def _reasoning_wire(self) -> dict[str, Any]:
        """The ``reasoning`` configuration the response ran with."""
        cfg = self.req.reasoning
        profile = self.job.tier.behavior.reasoning
        effort = cfg.effort if cfg is not None and cfg.effort is not None else (
            profile.default_effort if profile.enabled else None)
        summary = (cfg.summary or cfg.generate_summary) if cfg is not None else None
        return {"effort": effort, "summary": summary}

    def failed(self, error: APIError) -> Frames:
        resp = self.response("failed")
        resp["status"] = "failed"
        resp["error"] = {"code": error.code or "server_error", "message": error.message}
        return [("response.failed", self._event({"type": "response.failed", "response": resp}))]

    def body(self) -> dict[str, Any]:
        self.tokens(0, self.job.gen.output_tokens)
        return self.response("completed")

    def cancelled(self) -> Frames:
        """``response.incomplete`` with status cancelled, the partial output, and usage billed
        for the tokens generated before the cancel was seen (after settlement:
        ``job.billed_output`` and ``job.cost_usd`` are final)."""
        job = self.job
        resp = self.response("incomplete")
        resp["status"] = "cancelled"
        usage = responses_usage(job, job.billed_output)
        usage["cost_usd"] = job.cost_usd
        resp["usage"] = usage
        resp["time_info"] = job.time_info()
        return [("response.incomplete",
                 self._event({"type": "response.incomplete", "response": resp}))]


def _tool_wire(tool: Any) -> Any:
    """A tool as the response echoes it: as sent, a function tool with ``description``,
    ``parameters`` and ``strict`` always present (null when the request left them out)."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return tool
    wire = {k: v for k, v in tool.items() if v is not None}
    for key in ("description", "parameters", "strict"):
        wire.setdefault(key, None)
    return wire


def _tool_choice_wire(req: ResponsesRequest) -> Any:
    c = req.tool_choice
    if c is None:
        return "auto"
    if isinstance(c, ResponsesToolChoice):
        return {"type": c.type, "name": c.name}
    return c


def _text_wire(req: ResponsesRequest) -> dict[str, Any]:
    """The ``text`` configuration echoed in the response (format and verbosity)."""
    text = req.text
    if text is None or text.format is None:
        return {"format": {"type": "text"}}
    return text.model_dump(by_alias=True, exclude_none=True)
