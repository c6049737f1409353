"""The load generator's SSE scanner: token arrival times from a chat-completion stream, fed one
network chunk at a time, cheaply.

The hot path is one ``bytes.split`` per chunk and, per event, two substring tests: an event
shaped like ``data: {…"delta":{"content":"<non-empty>…}`` is a token and is not decoded at all.
Everything else (the role chunk, tool-call deltas, finish reason, usage, errors, comments,
multi-line events) goes through ``orjson``. ``strict=True`` decodes every event, which also
catches a token event whose JSON is broken in the middle (the fast path only checks the shape).

Inside a JSON string every ``"`` is escaped, so the substrings searched for cannot be faked by
token text. Every token in one chunk gets that chunk's arrival time.
"""

from __future__ import annotations

from array import array
from typing import Any

import orjson

_TOKEN = b'"delta":{"content":"'
_EMPTY = b'"delta":{"content":""'
_DATA = b"data: {"
_TOKEN_KEYS = ("content", "reasoning_content", "reasoning")


class StreamParser:
    """Accumulates one response: token arrival times, tool calls, finish, usage, errors."""

    __slots__ = (
        "t0", "strict", "buf", "times", "counts", "events", "ttft", "done", "finish_reason",
        "usage", "time_info", "error", "malformed", "tools",
    )  # fmt: skip

    def __init__(self, t0: float, strict: bool = False) -> None:
        self.t0 = t0
        self.strict = strict
        self.buf = b""
        self.times = array("d")
        self.counts = array("l")
        self.events = 0
        self.ttft: float | None = None
        self.done = False
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.time_info: dict[str, Any] | None = None
        self.error: str | None = None
        self.malformed: str | None = None
        self.tools: dict[int, list[Any]] = {}  # index -> [name, [argument fragments]]

    def feed(self, chunk: bytes, now: float) -> int:
        """Parse the complete events in ``chunk`` (plus what was left over); tokens found."""
        buf = self.buf + chunk if self.buf else chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            self.buf = buf
            return 0
        self.buf = buf[cut + 2 :]
        n = 0
        fast = not self.strict
        for ev in buf[:cut].split(b"\n\n"):
            if (
                fast
                and _TOKEN in ev
                and ev.startswith(_DATA)
                and ev.endswith(b"}")
                and _EMPTY not in ev
            ):
                n += 1
            elif ev:
                n += self._event(ev)
        if n:
            if self.ttft is None:
                self.ttft = now - self.t0
            self.events += n
            self.times.append(now - self.t0)
            self.counts.append(n)
        return n

    def close(self, now: float) -> None:
        """The body ended: parse a last event that lacked its blank line."""
        rest = self.buf.strip()
        self.buf = b""
        if rest:
            self.feed(rest + b"\n\n", now)

    def outcome(self) -> tuple[str | None, str | None]:
        """(error kind, detail) of the finished stream; (None, None) when it is complete."""
        if self.error is not None:
            return "stream_error", self.error
        if self.malformed is not None:
            return "malformed", self.malformed
        if not self.done and self.finish_reason is None:
            return "disconnect", "the stream ended before its finish_reason / [DONE]"
        return None, None

    # -- slow path --------------------------------------------------------------------------

    def _event(self, ev: bytes) -> int:
        data: list[bytes] = []
        for line in ev.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line or line.startswith((b":", b"event:", b"id:", b"retry:")):
                continue
            else:
                self._bad(f"not an SSE field: {line[:60]!r}")
                return 0
        if not data:
            return 0
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        if payload == b"[DONE]":
            self.done = True
            return 0
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self._bad(f"event data is not JSON: {payload[:60]!r}")
            return 0
        if not isinstance(obj, dict):
            self._bad(f"event data is not an object: {payload[:60]!r}")
            return 0
        return self._chunk(obj)

    def _chunk(self, obj: dict[str, Any]) -> int:
        err = obj.get("error")
        if err:
            msg = err.get("message") if isinstance(err, dict) else str(err)
            self.error = str(msg)[:200]
            return 0
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        info = obj.get("time_info")
        if isinstance(info, dict):
            self.time_info = info
        choices = obj.get("choices")
        if choices is None:
            if usage is None:
                self._bad("chunk without choices or usage")
            return 0
        if not isinstance(choices, list):
            self._bad("choices is not a list")
            return 0
        n = 0
        for choice in choices:
            if not isinstance(choice, dict):
                self._bad("a choice is not an object")
                continue
            delta = choice.get("delta") or {}
            if any(isinstance(delta.get(k), str) and delta[k] for k in _TOKEN_KEYS):
                n += 1
            calls = delta.get("tool_calls")
            if calls:
                n += 1
                self._tool_deltas(calls)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return n

    def _tool_deltas(self, calls: Any) -> None:
        if not isinstance(calls, list):
            self._bad("tool_calls is not a list")
            return
        for call in calls:
            if not isinstance(call, dict):
                continue
            idx = call.get("index", 0)
            slot = self.tools.setdefault(idx if isinstance(idx, int) else 0, ["", []])
            fn = call.get("function") or {}
            if fn.get("name"):
                slot[0] = str(fn["name"])
            args = fn.get("arguments")
            if isinstance(args, str):
                slot[1].append(args)

    def _bad(self, why: str) -> None:
        if self.malformed is None:
            self.malformed = why

    def tool_calls(self) -> list[tuple[str, str]]:
        return [(name, "".join(parts)) for _, (name, parts) in sorted(self.tools.items())]
