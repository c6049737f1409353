"""What the load generator records: per request (the input of ``clients.stats``), live
counters while it runs, and per run (``RunResult``, ``GeneratorStats``).

Times are seconds. ``start`` is from the start of the run; every other time is from the
request's own start (the moment its bytes were handed to the transport). Token arrival times
are kept per received network chunk (``chunk_times``) with the number of tokens that chunk
carried (``chunk_tokens``): every token in one chunk arrived at the same moment.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import asdict, dataclass, field
from typing import Any

# Error kinds (a request has at most one): "http_<status>", "timeout", "disconnect" (the
# connection broke or the stream ended before [DONE]), "malformed" (bytes that are not a valid
# SSE chat stream), "stream_error" (the server sent an error object mid-stream), "connect"
# (no connection could be made), "client_error" (anything else, with ``detail``).
ERROR_KINDS_DOC = "http_<status> timeout disconnect malformed stream_error connect client_error"


@dataclass(slots=True)
class ToolCallRecord:
    name: str
    arguments: str


@dataclass(slots=True)
class RequestResult:
    index: int
    tier: str  # the tier asked for
    start: float  # seconds from the start of the run
    scheduled: float | None = None  # open loop: intended start, seconds from the run start
    served_tier: str | None = None  # x-fastmode-tier header, when the server says
    status: int | None = None  # HTTP status
    error: str | None = None  # error kind; None when the request succeeded
    detail: str | None = None  # one line about the error
    end: float | None = None  # end of the response, from the request start
    ttft: float | None = None  # first token, from the request start
    chunk_times: array[float] = field(default_factory=lambda: array("d"))
    chunk_tokens: array[int] = field(default_factory=lambda: array("l"))
    events: int = 0  # token events parsed (content or tool-call deltas)
    output_tokens: int | None = None  # usage.completion_tokens, else the token events
    prompt_tokens: int | None = None  # usage.prompt_tokens, else the intended length
    cost_usd: float | None = None  # usage.cost_usd (fastmode)
    finish_reason: str | None = None
    tools: list[dict[str, Any]] | None = None  # tools offered (for validity checks)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    time_info: dict[str, Any] | None = None  # server-side timings (Cerebras convention)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tokens(self) -> int:
        """Output tokens: the server's usage when it reported it, else the events counted."""
        return self.output_tokens if self.output_tokens is not None else self.events


@dataclass
class Live:
    """Counters the progress display reads (updated by the request tasks)."""

    sent: int = 0
    done: int = 0
    errors: int = 0
    tokens: int = 0
    inflight: int = 0


LIVE_FIELDS = ("sent", "done", "errors", "tokens", "inflight")


@dataclass(frozen=True)
class GeneratorStats:
    """The generator's self-check: was it the bottleneck? (``generator`` in the JSON)."""

    workers: int
    wall_s: float
    cpu_s: float
    cpu_utilisation: float | None  # of one core; with workers, the busiest one's
    schedule_lag_p99_s: float | None  # open loop: actual - scheduled start
    schedule_lag_max_s: float | None
    interrupted: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunResult:
    results: list[RequestResult]
    send_end: float  # seconds from the run start when sending stopped
    wall_s: float
    cpu_s: float  # the generator's own CPU time (process), to check it was not the bottleneck
    started_at: float  # Unix time of the run start
    interrupted: bool = False
    workers: int = 1
    busiest_worker_cpu: float | None = None  # with workers: the busiest one's CPU share

    def generator(self) -> GeneratorStats:
        lags = sorted(r.start - r.scheduled for r in self.results if r.scheduled is not None)
        util = self.cpu_s / self.wall_s if self.wall_s > 0 else None
        return GeneratorStats(
            workers=self.workers,
            wall_s=self.wall_s,
            cpu_s=self.cpu_s,
            cpu_utilisation=util if self.workers == 1 else self.busiest_worker_cpu,
            schedule_lag_p99_s=lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)]
            if lags else None,
            schedule_lag_max_s=lags[-1] if lags else None,
            interrupted=self.interrupted,
        )
