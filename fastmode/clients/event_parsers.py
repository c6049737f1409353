"""Wire format -> typed events: Chat Completions chunks, Responses API events, error bodies.

Pure functions of decoded JSON and a timestamp (no I/O): ``clients.client`` feeds them what it
reads from an SSE stream or a websocket, and they say which ``clients.events`` happened.
"""

from __future__ import annotations

from typing import Any

import orjson

from fastmode.clients.events import Done, Error, Event, TextDelta, ToolCallDelta, Usage

TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def error_event(obj: dict[str, Any], t: float, status: int | None = None) -> Error:
    """An OpenAI error object (``{"message", "type", "code", "param"}``) as an ``Error``."""
    return Error(
        message=str(obj.get("message") or obj),
        t=t,
        status=status,
        type=obj.get("type"),
        code=obj.get("code"),
        param=obj.get("param"),
    )


def http_error_event(status: int, raw: bytes | bytearray, t: float) -> Error:
    """A non-200 answer: its OpenAI error body when it has one, else its text."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return error_event(body["error"], t, status)
    text = bytes(raw).decode(errors="replace").strip() or f"HTTP {status}"
    return Error(text[:500], t, status=status)


class ChatParser:
    """Chat Completions chunks -> events."""

    def __init__(self) -> None:
        self.finish: str | None = None
        self.id: str | None = None
        self.model: str | None = None
        self.service_tier: str | None = None
        self.time_info: dict[str, Any] | None = None

    def feed(self, obj: dict[str, Any], t: float) -> list[Event]:
        if obj.get("error"):
            return [error_event(obj["error"], t)]
        out: list[Event] = []
        self.id = obj.get("id", self.id)
        self.model = obj.get("model", self.model)
        self.service_tier = obj.get("service_tier", self.service_tier)
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                out.append(TextDelta(content, t))
            for call in delta.get("tool_calls") or ():
                fn = call.get("function") or {}
                out.append(ToolCallDelta(call.get("index", 0), fn.get("arguments") or "", t,
                                         call.get("id"), fn.get("name")))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        if obj.get("time_info"):
            self.time_info = obj["time_info"]
        usage = obj.get("usage")
        if usage:
            details = usage.get("prompt_tokens_details") or {}
            out.append(Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
                             details.get("cached_tokens") or 0, t, usage.get("cost_usd")))
        return out

    def done(self, t: float) -> Done:
        return Done(self.finish, t, self.id, self.model, self.service_tier, self.time_info)


class ResponsesParser:
    """Responses API stream events (SSE ``data`` or websocket frames) -> events."""

    def __init__(self) -> None:
        self.finished = False
        self._calls: dict[int, tuple[str | None, str | None]] = {}  # announced, no args yet

    def feed(self, obj: dict[str, Any], t: float) -> list[Event]:
        kind = obj.get("type")
        if kind == "response.output_text.delta":
            return [TextDelta(obj.get("delta", ""), t)]
        if kind == "response.function_call_arguments.delta":
            index = obj.get("output_index", 0)
            call_id, name = self._calls.pop(index, (None, None))
            return [ToolCallDelta(index, obj.get("delta", ""), t, call_id, name)]
        if kind == "response.output_item.added":
            item = obj.get("item") or {}
            if item.get("type") == "function_call":
                self._calls[obj.get("output_index", 0)] = (item.get("call_id"), item.get("name"))
            return []
        if kind in TERMINAL_EVENTS:
            self.finished = True
            resp = obj.get("response") or {}
            out: list[Event] = []
            usage = resp.get("usage")
            if usage:
                details = usage.get("input_tokens_details") or {}
                out.append(Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0),
                                 details.get("cached_tokens") or 0, t, usage.get("cost_usd")))
            if kind == "response.failed":
                out.append(error_event(resp.get("error") or {"message": "response failed"}, t))
            details = resp.get("incomplete_details") or {}
            reason = details.get("reason") or resp.get("status")
            out.append(Done(reason, t, resp.get("id"), resp.get("model"),
                            resp.get("service_tier"), resp.get("time_info")))
            return out
        if kind == "error":
            self.finished = True
            return [error_event(obj.get("error") or {}, t, obj.get("status"))]
        return []
