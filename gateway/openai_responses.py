"""OpenAI Responses API: input items -> messages, reply -> response object and event sequence.

The same ``ResponseEvents`` encoder feeds the SSE stream (``event:`` + ``data:`` lines) and the
websocket (one JSON text frame per event), so both transports send identical events.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from backends.textgen import GenerationRequest, ToolSpec
from backends.tokenizer import count_chat_prompt

from .errors import APIError, bad_request
from .schemas import ResponsesRequest, ResponsesToolChoice, resolve_tool_choice
from .service import FAST_SERVICE_TIERS, Job, service_tier_label


@dataclass
class StoredResponse:
    """What a later turn needs from an earlier response to continue it."""

    id: str
    model: str
    messages: list[dict[str, Any]]  # the whole conversation, the reply included
    context_tokens: int  # prompt + output tokens of that response: cached for the next turn


class ResponseStore:
    """Bounded in-memory store of recent responses (``previous_response_id``)."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, item: StoredResponse) -> None:
        self._items[item.id] = item
        self._items.move_to_end(item.id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, rid: str) -> StoredResponse | None:
        return self._items.get(rid)


def input_messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    """Responses input items as chat messages (what the tokenizer and the mock model read)."""
    msgs: list[dict[str, Any]] = []
    if req.instructions:
        msgs.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        msgs.append({"role": "user", "content": req.input})
        return msgs
    for i, item in enumerate(req.input):
        kind = item.get("type", "message")
        if kind == "message" or ("role" in item and "type" not in item):
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(
                    f"Invalid value for 'input[{i}].role': {role!r}.", param=f"input[{i}].role"
                )
            msgs.append({"role": role, "content": item.get("content")})
        elif kind == "function_call":
            msgs.append({
                "role": "assistant",
                "content": None,
                "tool_calls": [{
                    "id": item.get("call_id", ""),
                    "type": "function",
                    "function": {"name": item.get("name", ""),
                                 "arguments": item.get("arguments", "")},
                }],
            })
        elif kind == "function_call_output":
            out = item.get("output", "")
            msgs.append({
                "role": "tool",
                "tool_call_id": item.get("call_id", ""),
                "content": out if isinstance(out, str) else orjson.dumps(out).decode(),
            })
        elif kind in ("reasoning", "item_reference"):
            continue
        else:
            raise bad_request(
                f"Invalid value for 'input[{i}].type': {kind!r} is not supported.",
                param=f"input[{i}].type",
            )
    return msgs


def normalise(
    req: ResponsesRequest, store: ResponseStore | None
) -> tuple[GenerationRequest, int, int | None, bool, int, list[dict[str, Any]]]:
    """Returns (generation request, prompt tokens, cap, fast, cached tokens, messages)."""
    messages = input_messages(req)
    cached = 0
    if req.previous_response_id:
        prev = store.get(req.previous_response_id) if store else None
        if prev is None:
            raise APIError(
                400,
                f"Previous response with id '{req.previous_response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        messages = prev.messages + messages
        cached = prev.context_tokens
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
    specs = tuple(ToolSpec.from_wire(t) for t in tools)
    choice = req.tool_choice
    named = isinstance(choice, ResponsesToolChoice)
    tool_choice = resolve_tool_choice(
        {s.name for s in specs}, None if named else choice, choice.name if named else None
    )
    gen = GenerationRequest(
        messages=messages,
        seed=req.seed,
        temperature=1.0 if req.temperature is None else req.temperature,
        tools=specs,
        tool_choice=tool_choice,
        ignore_eos=req.ignore_eos,
    )
    prompt = count_chat_prompt(messages, tools or None)
    fast = req.service_tier in FAST_SERVICE_TIERS
    return gen, prompt, req.max_output_tokens, fast, min(cached, prompt - 1), messages


def conversation_after(job: Job, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation including this response's reply, for the next turn."""
    gen = job.gen
    if gen.tool_calls:
        reply = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in gen.tool_calls
            ],
        }
    else:
        reply = {"role": "assistant", "content": gen.text}
    return messages + [reply]


class ResponseEvents:
    """The event sequence of one response, as JSON bytes per event (with sequence numbers)."""

    def __init__(self, job: Job, req: ResponsesRequest, usage: dict[str, Any]) -> None:
        self.job = job
        self.req = req
        self.usage = usage
        self.seq = 0
        self.rid = job.id.replace("req-", "resp_")
        self.msg_id = job.id.replace("req-", "msg_")
        self.fc_ids = [f"fc_{c.id[5:]}" for c in job.gen.tool_calls]
        self._text: list[str] = []
        self._args: dict[int, list[str]] = {}
        self._open_items: set[int] = set()
        prefix = orjson.dumps({
            "type": "response.output_text.delta",
            "item_id": self.msg_id,
            "output_index": 0,
            "content_index": 0,
        })[:-1]
        self._delta_prefix = prefix + b',"delta":'
        self._delta_mid = b',"logprobs":[],"sequence_number":'

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
        return {
            "id": self.fc_ids[k],
            "type": "function_call",
            "status": status,
            "call_id": call.id,
            "name": call.name,
            "arguments": args,
        }

    def response(self, status: str) -> dict[str, Any]:
        job, req = self.job, self.req
        done = status == "completed"
        output: list[dict[str, Any]] = []
        if done or status == "incomplete":
            st = "completed" if done else "incomplete"
            if job.gen.tool_calls:
                output = [self._call_item(k, st) for k in range(len(job.gen.tool_calls))]
            else:
                output = [self._message_item(st)]
        incomplete = None
        if job.gen.finish_reason == "length" and done:
            incomplete = {"reason": "max_output_tokens"}
        return {
            "id": self.rid,
            "object": "response",
            "created_at": job.created,
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
            "service_tier": service_tier_label(job.tier.name),
            "store": True if req.store is None else req.store,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": _tool_choice_wire(req),
            "tools": [t.model_dump(exclude_none=True) for t in req.tools or []],
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "truncation": "disabled",
            "usage": self.usage if done else None,
            "metadata": req.metadata or {},
            "time_info": job.time_info() if done else None,
        }

    # -- the events -------------------------------------------------------------------------

    def opening(self) -> list[tuple[str, bytes]]:
        return [
            ("response.created", self._event({"type": "response.created",
                                              "response": self.response("in_progress")})),
            ("response.in_progress", self._event({"type": "response.in_progress",
                                                  "response": self.response("in_progress")})),
        ]

    def tokens(self, start: int, count: int) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        pieces = self.job.gen.pieces
        for i in range(start, min(start + count, len(pieces))):
            piece = pieces[i]
            k = piece.tool
            if k < 0:
                if 0 not in self._open_items:
                    self._open_items.add(0)
                    out += self._open_message()
                self._text.append(piece.text)
                body = (self._delta_prefix + orjson.dumps(piece.text) + self._delta_mid
                        + str(self.seq).encode() + b"}")
                self.seq += 1
                out.append(("response.output_text.delta", body))
            else:
                if k not in self._open_items:
                    self._open_items.add(k)
                    out.append(("response.output_item.added", self._event({
                        "type": "response.output_item.added", "output_index": k,
                        "item": self._call_item(k, "in_progress")})))
                self._args.setdefault(k, []).append(piece.text)
                out.append(("response.function_call_arguments.delta", self._event({
                    "type": "response.function_call_arguments.delta",
                    "item_id": self.fc_ids[k], "output_index": k, "delta": piece.text})))
        return out

    def _open_message(self) -> list[tuple[str, bytes]]:
        item = self._message_item("in_progress")
        item["content"] = []
        return [
            ("response.output_item.added", self._event({
                "type": "response.output_item.added", "output_index": 0, "item": item})),
            ("response.content_part.added", self._event({
                "type": "response.content_part.added", "item_id": self.msg_id,
                "output_index": 0, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})),
        ]

    def closing(self) -> list[tuple[str, bytes]]:
        gen = self.job.gen
        out: list[tuple[str, bytes]] = []
        if gen.tool_calls:
            for k, call in enumerate(gen.tool_calls):
                if k not in self._open_items:
                    out.append(("response.output_item.added", self._event({
                        "type": "response.output_item.added", "output_index": k,
                        "item": self._call_item(k, "in_progress")})))
                out.append(("response.function_call_arguments.done", self._event({
                    "type": "response.function_call_arguments.done", "item_id": self.fc_ids[k],
                    "output_index": k, "name": call.name, "arguments": call.arguments})))
                out.append(("response.output_item.done", self._event({
                    "type": "response.output_item.done", "output_index": k,
                    "item": self._call_item(k, "completed")})))
        else:
            if 0 not in self._open_items:
                out += self._open_message()
            out.append(("response.output_text.done", self._event({
                "type": "response.output_text.done", "item_id": self.msg_id, "output_index": 0,
                "content_index": 0, "text": gen.text, "logprobs": []})))
            out.append(("response.content_part.done", self._event({
                "type": "response.content_part.done", "item_id": self.msg_id,
                "output_index": 0, "content_index": 0,
                "part": {"type": "output_text", "text": gen.text, "annotations": [],
                         "logprobs": []}})))
            out.append(("response.output_item.done", self._event({
                "type": "response.output_item.done", "output_index": 0,
                "item": self._message_item("completed")})))
        resp = self.response("completed")
        kind = "response.incomplete" if resp["status"] == "incomplete" else "response.completed"
        out.append((kind, self._event({"type": kind, "response": resp})))
        return out

    def failed(self, message: str, code: str = "server_error") -> list[tuple[str, bytes]]:
        resp = self.response("failed")
        resp["status"] = "failed"
        resp["error"] = {"code": code, "message": message}
        return [("response.failed", self._event({"type": "response.failed", "response": resp}))]


def _tool_choice_wire(req: ResponsesRequest) -> Any:
    c = req.tool_choice
    if c is None:
        return "auto"
    if isinstance(c, ResponsesToolChoice):
        return {"type": "function", "name": c.name}
    return c


def sse(events: list[tuple[str, bytes]]) -> bytes:
    return b"".join(b"event: " + t.encode() + b"\ndata: " + body + b"\n\n" for t, body in events)
