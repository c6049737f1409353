"""The one shape every tool's results are read into (``ToolRun``), and its helpers.

Metrics are named ``ttft``, ``itl``, ``tpot``, ``e2e`` (seconds; stats ``p50``/``p90``/``p99``/
``mean``), ``output_tps`` and ``request_tps`` (stat ``value``), ``output_tokens`` (``total``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Stats = dict[str, float]
STATS = ("p50", "p90", "p99", "mean")


class Unreadable(ValueError):
    """The results are not a tool's output that ``verify`` can read (refused, never guessed)."""


@dataclass(slots=True)
class ToolRequest:
    """One request as the tool measured it (seconds); None where it does not say."""

    request_id: str | None = None
    start: float | None = None  # Unix time the tool started its clock
    ttft: float | None = None
    e2e: float | None = None
    itl: float | None = None  # the tool's per-request ITL (its mean)
    output_tokens: int | None = None
    response_id: str | None = None  # the id in the response body, if the tool keeps it
    connect: float | None = None  # the part of its clock spent connecting, if it says
    token_times: list[float] | None = None  # when it read each output token (its clock)


@dataclass
class ToolRun:
    tool: str
    source: str
    metrics: dict[str, Stats] = field(default_factory=dict)
    requests: list[ToolRequest] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the file says about how it measured
    percentiles: str = "linear"  # how the tool computes them (``compare.percentile``)
    # what the tool's ITL distribution is over, by its own definition: ``token`` (each gap),
    # ``request`` (one mean per request: aiperf), ``request-per-token`` (each request's mean
    # once per token: guidellm)
    itl: str = "token"
    # what the tool's TPOT is, by its own definition: ``gaps`` (last − first token over N − 1:
    # vLLM, aiperf, inference-perf) or ``from-start`` ((last token − the tool's own request
    # start) / N, TTFT included, its distribution weighted by N: guidellm's
    # ``time_per_output_token_ms``)
    tpot: str = "gaps"
    # the clock of ``ToolRequest.start`` and ``token_times``: ``unix`` (``time.time``), or
    # ``monotonic`` (its own origin: ``clock.align`` puts it on the server's)
    clock: str = "unix"
    # metric -> the reason the tool's own file gives for a figure that differs from the server's
    # (a convention ``verify`` cannot recompute from the traces)
    hints: dict[str, str] = field(default_factory=dict)

    @property
    def has_ids(self) -> bool:
        """The tool exports an id per request that the traces can be joined on."""
        return any(r.request_id or r.response_id for r in self.requests)


def scaled(d: dict[str, Any] | None, keys: dict[str, str], scale: float = 1.0) -> Stats:
    """``{our stat: d[their key] * scale}`` for the keys present."""
    out: Stats = {}
    for ours, theirs in keys.items():
        v = (d or {}).get(theirs)
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[ours] = float(v) * scale
    return out


def number(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None
