"""A tool whose per-request clock is monotonic (inference-perf: ``time.perf_counter``) put on
the server's Unix clock, and the client's reading of each token.

The traces are in Unix time; such a tool's starts and token times are seconds since some
point of its own. The two clocks differ by one offset, which the requests themselves bound:
the server cannot see a request before the tool started it (``arrival - start >= 0``), nor the
tool read an event before the server sent it (``read - sent >= 0``). Every offset between the
two bounds keeps every request causal; the middle one is taken, and the width of the interval
is how well the split of the client's time (before the arrival, reading) is known. The totals
(TTFT, E2E over the server's) do not depend on it.

With the tokens' times the tool kept, each gap *as the client read it* is known too: its
gaps are the server's plus the difference of two readings, and a tool whose per-token ITL is
its own gaps is right even where reading jitter moves the tail (``compare``).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import accumulate

from fastmode.clients.verify.overhead import JITTER
from fastmode.clients.verify.records import ToolRequest
from fastmode.clients.verify.truth import Truth


def align(pairs: list[tuple[ToolRequest, Truth]]
          ) -> tuple[list[tuple[ToolRequest, Truth]], str | None]:
    """The pairs with the tool's times moved onto the server's clock, and a finding."""
    low, high = float("-inf"), float("inf")
    for r, t in pairs:
        if r.start is None:
            continue
        high = min(high, t.arrival - r.start)
        if r.ttft is not None and t.first_token is not None:
            low = max(low, t.first_token - (r.start + r.ttft))
        if r.e2e is not None:
            low = max(low, t.last_byte - (r.start + r.e2e))
    if high == float("inf"):
        return pairs, None
    if low == float("-inf"):
        low = high
    offset = (low + high) / 2
    moved = [(replace(r, start=None if r.start is None else r.start + offset,
                      token_times=None if r.token_times is None else
                      [x + offset for x in r.token_times]), t) for r, t in pairs]
    if low <= high + JITTER:
        note = (f"its per-request clock is monotonic: put on the server's by the requests' own "
                f"order (known within ±{500 * max(0.0, high - low):.2f} ms)")
    else:
        note = (f"its per-request clock is monotonic, and no offset makes every request "
                f"causal (by {1000 * (low - high):.2f} ms): it times another event somewhere")
    return moved, note


def read_gaps(pairs: list[tuple[ToolRequest, Truth]]) -> list[float] | None:
    """Every token gap as the tool read it, when it kept a time per token of every request
    (as many as the server sent, one token per event) and read none before the server sent
    it; None otherwise."""
    gaps: list[float] = []
    for r, t in pairs:
        times = r.token_times
        if (times is None or t.first_token is None or len(times) != t.output_tokens
                or t.token_events != t.output_tokens):
            return None
        sent = list(accumulate((g for g, _ in t.gaps), initial=t.first_token))
        if len(sent) != len(times) or any(x - s < -JITTER for x, s in zip(times, sent,
                                                                          strict=True)):
            return None
        gaps += [b - a for a, b in zip(times, times[1:], strict=False)]
    return gaps or None
