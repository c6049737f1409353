"""The client's own time in a latency, per request, measured rather than assumed.

A tool's TTFT runs from its clock's start to its reading of the first token; the server's
from the request's arrival to the first token's send. On one host (both clocks ``time.time``)
the difference splits, per request, into

* ``before``: the tool's start to the server's arrival (connecting, sending the body, a clock
  started before either), and
* ``read``: the server's send to the tool's reading (the loopback, the tool's parsing, its event
  loop's delays); for E2E, the last byte's send to the tool's end.

Both are the client's when they are not negative: the tool started before the server saw the
request, and read after the server sent. A request whose reading comes *before* the server's
send (by more than the clocks' jitter) is not overhead: the tool timed another event. The
server's figure plus each request's client time is what a right tool on this host reports;
a tool off from that is off by its formula.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from fastmode.clients.verify.records import ToolRequest
from fastmode.clients.verify.truth import Truth

JITTER = 0.5e-3  # two processes reading one host's clock: what "not before" allows


@dataclass(slots=True)
class ClientTime:
    """One request's client time for one latency (seconds)."""

    key: str  # the tool's id for the request, else the server's
    server: float  # the server's figure
    before: float  # the tool's start to the server's arrival
    read: float  # the server's send to the tool's reading
    connect: float | None  # the part of ``before`` the tool says it spent connecting
    # the reading measured from the event before the right one (TTFT: the first byte; E2E: the
    # last token): not negative when the tool timed that event instead
    earlier: float | None = None

    @property
    def causal(self) -> bool:
        return self.before >= -JITTER and self.read >= -JITTER

    @property
    def total(self) -> float:
        return self.before + self.read

    def describe(self) -> str:
        connect = "" if not self.connect else f", {1000 * self.connect:.2f} connecting"
        return (f"{self.key} ({1000 * self.total:+.2f} ms: {1000 * self.before:.2f} before "
                f"arrival{connect}, {1000 * self.read:.2f} reading)")


def client_times(metric: str, pairs: list[tuple[ToolRequest, Truth]]) -> list[ClientTime]:
    """Per joined request with the tool's start clock and its figure for ``metric`` (``ttft``
    or ``e2e``); empty when the tool exports no start clock (no split can be made)."""
    out: list[ClientTime] = []
    for r, t in pairs:
        if r.start is None:
            continue
        if metric == "ttft" and r.ttft is not None and t.ttft is not None and t.first_token is not None:
            end, sent, server, before = r.start + r.ttft, t.first_token, t.ttft, t.first_byte
        elif metric == "e2e" and r.e2e is not None:
            end, sent, server = r.start + r.e2e, t.last_byte, t.e2e
            before = t.last_token if t.last_token is not None else t.last_byte
        else:
            continue
        out.append(ClientTime(r.request_id or r.response_id or t.request_id, server,
                              t.arrival - r.start, end - sent, r.connect, end - before))
    return out


def as_the_client_sees(times: list[ClientTime]) -> list[float]:
    """Per request, the server's figure plus the client's time where that is the client's
    (causal); a request that read before the server sent keeps the server's own figure."""
    return [c.server + c.total if c.causal else c.server for c in times]


def outliers(times: list[ClientTime], floor: float = 2e-3) -> list[ClientTime]:
    """The requests whose client time is far above the others' (median + 3 × the median
    absolute deviation, and at least ``floor`` above the median): what drives a tail."""
    if len(times) < 3:
        return []
    totals = [c.total for c in times]
    med = statistics.median(totals)
    mad = statistics.median(abs(x - med) for x in totals)
    cut = med + max(3 * mad, floor)
    return sorted((c for c in times if c.total > cut), key=lambda c: -c.total)


def before(times: list[ClientTime]) -> float:
    """The median time the tool's clock runs before the server's arrival (0 if unknown)."""
    return statistics.median(c.before for c in times) if times else 0.0


def summary(times: list[ClientTime]) -> str:
    """The medians of the split, for a row's *why*."""
    before = statistics.median(c.before for c in times)
    read = statistics.median(c.read for c in times)
    conn = statistics.median(c.connect or 0.0 for c in times)
    connect = f" ({1000 * conn:.2f} connecting)" if conn else ""
    return (f"{1000 * before:.2f} ms before the server's arrival{connect} and "
            f"{1000 * read:.2f} ms reading (medians)")


_EARLIER = {"ttft": ("the first token", "the first byte (an event without tokens)"),
            "e2e": ("the last byte", "the last token (not the stream's end)")}


def findings(metric: str, times: list[ClientTime]) -> list[str]:
    out: list[str] = []
    name = metric.upper()
    right, earlier = _EARLIER[metric]
    wrong = [c for c in times if not c.causal]
    if wrong:
        worst = min(wrong, key=lambda c: min(c.before, c.read))
        at = [c for c in wrong if c.before >= -JITTER and c.earlier is not None and c.earlier >= -JITTER]
        what = (f"it ends at {earlier} on {len(at)} of them" if at else
                "the tool times another event, or its clock is not the server's")
        out.append(f"{name}: {len(wrong)} of {len(times)} requests end before the server sent "
                   f"{right} (e.g. {worst.describe()}): {what}; their gap is not taken for the "
                   "client's")
    slow = outliers([c for c in times if c.causal])
    if slow:
        shown = "; ".join(c.describe() for c in slow[:5])
        more = f" and {len(slow) - 5} more" if len(slow) > 5 else ""
        out.append(f"{name}: the client's time is far above the others' on {len(slow)} "
                   f"requests: {shown}{more}")
    return out
