"""A recorded exchange's events handed out at their recorded times: ``ReplayStream``.

It stands where an engine job has the engine's ``TokenStream`` (the ``TokenSource`` contract,
``gateway.values.token_source``), with one difference of unit: what it counts is *recorded events*,
not tokens — the cassette encoder (``gateway.cassettes.encoder``) turns the i-th unit into the
i-th recorded event, so the client gets the recorded bytes, event by event. A non-streamed
exchange is one unit: its body, at its recorded time.

Event ``i`` is due at ``arrival + t_i`` (``--replay-timing recorded``) or at ``arrival``
(``none``): those are the stream's modeled times (``token_at``, ``last_at``, the job's
``time_info``), fixed when the stream is made, whatever the event loop's punctuality. ``take``
hands out every event due by the clock; ``ready`` is one timer to the next due event (one per
event, never per byte). ``produced`` answers in tokens (the content pieces the events handed
out carried), since a cut-short replay is billed for them.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

from fastmode.backends.drivers.token_stream import CountStream
from fastmode.backends.scheduler import CANCELLED, DECODE, FINISHED, WAITING

# an event due within this much of now is handed out: a timer may fire a clock tick early,
# and waiting again for the remaining fraction of a millisecond would only spin
EARLY_S = 0.001


class ReplaySeq:
    """State and times of a replayed exchange (the parts of an engine ``Sequence`` jobs read)."""

    __slots__ = ("state", "arrival", "admitted_at", "first_token_at", "finished_at",
                 "first_step")

    def __init__(self, arrival: float) -> None:
        self.state = WAITING
        self.first_step = -1  # no engine step: settlement bills what was handed out
        self.arrival = self.admitted_at = arrival
        self.first_token_at = -1.0
        self.finished_at = -1.0


class ReplayStream(CountStream):
    __slots__ = ("seq", "due", "tokens", "delivered", "since", "tag", "_clock", "_first",
                 "_waiter", "_timer")
    interval = 1
    watched_at = -1.0

    def __init__(self, offsets: Sequence[float], units: Sequence[int], arrival: float,
                 clock: Callable[[], float], delay: bool = True) -> None:
        """``offsets``: each event's time after the request; ``units``: the content pieces
        each carries; ``delay`` False: every event is due at once (``--replay-timing none``)."""
        self.seq = ReplaySeq(arrival)
        self.due = [arrival + t if delay else arrival for t in offsets]
        self.tokens = [0, *accumulate(units)]  # tokens[k]: pieces in the first k events
        # the first event that carries content: its time is the first token's
        self._first = next((i for i, n in enumerate(units) if n), 0)
        self.delivered = 0
        self.since = arrival
        self.tag: Any = None
        self._clock = clock
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def take(self) -> int:
        seq = self.seq
        if seq.state in (CANCELLED, FINISHED):
            return 0
        start = self.delivered
        end = bisect.bisect_right(self.due, self._clock() + EARLY_S, lo=start)
        if end == start:
            return 0
        self.delivered = end
        self.since = self.due[end - 1]
        if seq.first_token_at < 0 and end > self._first:
            seq.first_token_at = self.due[self._first]
            seq.state = DECODE
        if end == len(self.due):
            seq.state = FINISHED
            seq.finished_at = self.due[-1]
        return end - start

    def ready(self) -> asyncio.Future[None] | None:
        """A future resolved when the next event is due (None once all were handed out, or
        the stream was cancelled)."""
        if self.seq.state in (CANCELLED, FINISHED) or self.delivered >= len(self.due):
            return None
        loop = asyncio.get_running_loop()
        fut = self._waiter = loop.create_future()
        self._timer = loop.call_at(self.due[self.delivered], _wake, fut)
        return fut

    @property
    def last_at(self) -> float:
        return self.due[self.delivered - 1] if self.delivered else -1.0

    def token_at(self, k: int) -> float:
        return self.due[min(k, len(self.due) - 1)]

    def due_at(self, start: int, count: int) -> float:
        return self.token_at(start)

    def produced(self) -> int:
        return self.tokens[self.delivered]

    def host_lag(self) -> tuple[float, float]:
        return 0.0, 0.0  # the recorded times are the recording's own: no host lag to tell apart

    def cancel(self) -> None:
        if self.seq.state not in (CANCELLED, FINISHED):
            self.seq.state = CANCELLED
            if self._timer is not None:
                self._timer.cancel()
            if self._waiter is not None:
                _wake(self._waiter)

    async def aclose(self) -> None:
        self.cancel()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
