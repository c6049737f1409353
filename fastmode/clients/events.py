"""Typed stream events with client-side timestamps, and the summary of one turn.

Every event carries ``t``, the ``time.perf_counter()`` reading when the client parsed it, so
TTFT and tokens/s are measured where the user sits, network included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    t: float


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call; the first fragment of a call carries ``id`` and ``name``."""

    index: int
    arguments: str
    t: float
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    t: float
    cost_usd: float | None = None  # fastmode's extension, when the server reports it


@dataclass(frozen=True, slots=True)
class Error:
    message: str
    t: float
    status: int | None = None
    type: str | None = None
    code: str | None = None
    param: str | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """The end of a turn: ``reason`` is the finish reason (chat) or the response status."""

    reason: str | None
    t: float
    response_id: str | None = None
    model: str | None = None
    service_tier: str | None = None
    time_info: dict[str, Any] | None = None


Event = TextDelta | ToolCallDelta | Usage | Error | Done


@dataclass
class ToolCall:
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class Summary:
    """What one turn did, from the client's side (times are ``perf_counter`` readings)."""

    transport: str
    model: str
    started: float
    tier: str | None = None  # x-fastmode-tier header, else the response's service_tier
    first_token_at: float | None = None
    last_token_at: float | None = None
    done_at: float | None = None
    connect_s: float = 0.0  # websocket: time to open the socket on this turn (0 when warm)
    deltas: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    text_parts: list[str] = field(default_factory=list)
    tool_calls: dict[int, ToolCall] = field(default_factory=dict)
    response_id: str | None = None
    finish_reason: str | None = None
    error: Error | None = None
    time_info: dict[str, Any] | None = None

    def feed(self, event: Event) -> None:
        if isinstance(event, TextDelta | ToolCallDelta):
            if self.first_token_at is None:
                self.first_token_at = event.t
            self.last_token_at = event.t
            self.deltas += 1
            if isinstance(event, TextDelta):
                self.text_parts.append(event.text)
            else:
                call = self.tool_calls.setdefault(event.index, ToolCall())
                call.id = call.id or event.id
                call.name = call.name or event.name
                call.arguments += event.arguments
        elif isinstance(event, Usage):
            self.input_tokens = event.input_tokens
            self.output_tokens = event.output_tokens
            self.cached_tokens = event.cached_tokens
            self.cost_usd = event.cost_usd
        elif isinstance(event, Error):
            self.error = event
            self.done_at = event.t
        elif isinstance(event, Done):
            self.done_at = event.t
            self.finish_reason = event.reason
            self.response_id = event.response_id or self.response_id
            self.time_info = event.time_info
            if self.tier is None:
                self.tier = event.service_tier

    # -- derived --------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def tokens(self) -> int:
        return self.output_tokens if self.output_tokens is not None else self.deltas

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started

    @property
    def elapsed_s(self) -> float | None:
        return None if self.done_at is None else self.done_at - self.started

    @property
    def tokens_per_s(self) -> float | None:
        """Decode speed: tokens after the first over the time from the first to the last.

        The server's own clock when it reports one (``time_info.completion_time``, fastmode's
        and Cerebras' convention: it spans every output token, reasoning included, so it
        matches ``tokens``). Otherwise the client's: visible deltas over their span, and only
        from 3 deltas on. A short reply's few events can arrive in one read, and the billed
        count includes reasoning tokens never streamed in Chat: either made a 9-token reply
        read "20,380 tok/s"."""
        completion = (self.time_info or {}).get("completion_time")
        if isinstance(completion, (int, float)) and completion > 0 and self.tokens >= 2:
            return (self.tokens - 1) / completion
        if self.first_token_at is None or self.last_token_at is None or self.deltas < 3:
            return None
        span = self.last_token_at - self.first_token_at
        return (self.deltas - 1) / span if span > 0 else None

    def line(self) -> str:
        """``TTFT 84 ms · 1,093 tok/s · 120 tokens · $0.001234567 · tier spark``."""
        ttft = "—" if self.ttft_s is None else f"{self.ttft_s * 1000:,.0f} ms"
        speed = "—" if self.tokens_per_s is None else f"{self.tokens_per_s:,.0f} tok/s"
        # every digit the server keeps (whole nano-dollars): the number its ledger holds
        cost = "—" if self.cost_usd is None else f"${self.cost_usd:.9f}"
        parts = [f"TTFT {ttft}", speed, f"{self.tokens} tokens", cost,
                 f"tier {self.tier or '?'}", f"{self.model} over {self.transport}"]
        if self.cached_tokens:
            parts.insert(3, f"{self.cached_tokens} cached")
        return " · ".join(parts)
