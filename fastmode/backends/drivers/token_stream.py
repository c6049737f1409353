"""A request's tokens as the real-time replica produces them: ``TokenStream``.

The reader side of ``backends.drivers.realtime``: a stream hands out token counts (``take``),
gives the one future to await before more are due (``ready``), or is *listened to*
(``listen``: push mode, the replica hands its tokens over inside the step that makes them
due). ``CountStream`` is the iteration both this and the remote tiers' upstream streams share.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fastmode.backends.scheduler import CANCELLED, Sequence
from fastmode.backends.sequence import NEVER

log = logging.getLogger("fastmode.engine")


class StreamReplica(Protocol):
    """What a stream reads of the replica producing its tokens (``realtime.RealtimeReplica``
    is the one): declared here so that this module need not import the replica's, which
    imports it (the two would be one circle)."""

    loop: asyncio.AbstractEventLoop
    clock: Callable[[], float]  # modeled seconds
    scale: float  # wall seconds per modeled second
    late: float  # how far behind its modeled timeline the last step was served
    done_index: int
    done_end: float
    slipped: float
    stopped: bool
    listening: dict[int, list[TokenStream]]  # step index -> the listeners it calls

    def wait_for(self, index: int, fut: asyncio.Future[None] | TokenStream) -> None: ...

    def cancel(self, seq: Sequence) -> None: ...


class CountStream:
    """An async iterator of token counts over ``take`` (tokens due now, 0 if none) and
    ``ready`` (a future to await before more are due, None at the end). The gateway's hot loop
    calls the two itself; iterating is for everyone else. Upstream (remote) streams share it."""

    __slots__ = ()

    def take(self) -> int:
        raise NotImplementedError

    def ready(self) -> Awaitable[None] | None:
        raise NotImplementedError

    def __aiter__(self) -> CountStream:
        return self

    async def __anext__(self) -> int:
        while True:
            n = self.take()
            if n:
                return n
            waiter = self.ready()
            if waiter is None:
                raise StopAsyncIteration
            await waiter


class TokenStream(CountStream):
    """The tokens of one request as they are produced: an async iterator of token counts.

    Each item is how many tokens are new since the previous item: a multiple of ``interval``
    (all the events that are due), or, at the end, the remainder. A reader that keeps up gets
    ``interval`` at a time, when the last of them is produced. ``delivered`` counts the tokens
    handed out; ``last_at`` and ``due_at`` give modeled times (driver clock, seconds) of the
    last token handed out and of the moment the first event of the last item was due. Closing
    the stream (``aclose`` or ``cancel``) cancels the request in the engine: its slot and KV are
    free at the next step, and the reader gets no further item. ``tag`` is the caller's, from
    ``RealtimeDriver.submit``.

    Times are exact for the first and the last token of the reply and for every step the reader
    was woken at (the common case: a reader that keeps up); between two reads of a reader that
    fell behind they are interpolated over the steps in between (no per-step record is kept).
    """

    __slots__ = ("seq", "replica", "tag", "interval", "delivered", "since", "watch", "watched_at",
                 "waits_first", "lag_first", "lag_end", "_lag0", "_cancelled", "_fut", "_i0",
                 "_i1", "_t1", "_listener")

    def __init__(self, seq: Sequence, replica: StreamReplica, tag: Any = None,
                 interval: int = 1) -> None:
        self.seq = seq
        self.replica = replica
        self.tag = tag
        self.interval = interval
        self.delivered = 0
        self._cancelled = False
        self._fut: asyncio.Future[None] | None = None  # what the reader waits on
        self.waits_first = False  # ... for the first token (the replica wakes it then)
        self._i0 = self._i1 = -1  # replica step index at the previous read and at the last
        self.since = self._t1 = 0.0  # ... and their modeled ends
        # no event of the next item was due before ``since`` (the reader took all due ones):
        # a cheap lower bound of ``due_at`` for a lag check
        self.watch = -1  # a token whose exact time to keep (``watched_at``) when handed out
        self.watched_at = -1.0
        self._listener: Callable[[int, int], bool] | None = None  # push mode (``listen``)
        # the replica's ``slipped`` (host lag, seconds) when the request arrived, at its first
        # token and at its last (set by the replica, once each): ``host_lag``
        self._lag0 = replica.slipped
        self.lag_first = self.lag_end = -1.0

    def take(self) -> int:
        """Hand out the tokens due now: a multiple of ``interval`` (the events whose last token
        exists), or at the end the remainder; 0 if none. The hot loop (``gateway.pipeline.turn``) calls
        this and ``ready`` itself, so an item costs no coroutine of its own."""
        seq = self.seq
        first = seq.first_step
        if first < 0 or self._cancelled:
            return 0
        out, delivered, interval = seq.output_tokens, self.delivered, self.interval
        done = self.replica.done_index
        if seq.segments is None:
            produced = done - first + 1
            if produced > out:
                produced = out
        else:  # preempted once at least: its tokens come from the steps that made them
            produced = seq.tokens_after(done)
        n = produced - delivered
        if n < interval and produced < out or n <= 0:
            return 0
        if produced < out:
            n -= n % interval  # whole events only; the rest is not due yet
        self.delivered = delivered + n
        self._i0, self.since = self._i1, self._t1
        self._i1, self._t1 = done, self.replica.done_end
        if delivered <= self.watch < delivered + n:
            self.watched_at = self._time(seq.step_of(self.watch))
        return n

    def due_step(self) -> int:
        """The replica step that produces the last token of the next event (the next
        ``interval`` tokens after those handed out, or the reply's last): the one step a
        reader waits for. Only once decoding started (``seq.first_step`` known); while the
        sequence is preempted, ``NEVER`` (the step is known once it resumes)."""
        seq = self.seq
        out = seq.output_tokens
        want = self.delivered + self.interval
        k = (want if want < out else out) - 1
        return seq.first_step + k if seq.segments is None else seq.step_of(k)

    def ready(self) -> asyncio.Future[None] | None:
        """After ``take`` gave nothing: the future to await before tokens are due (the step
        producing the last token of the next event; the first token's step before decoding
        starts), or None when the stream is over (all handed out, cancelled, stopped)."""
        seq, rep = self.seq, self.replica
        if (self._cancelled or rep.stopped or seq.state == CANCELLED
                or self.delivered >= seq.output_tokens):
            return None
        fut = self._fut = rep.loop.create_future()
        index = self.due_step() if seq.first_step >= 0 else NEVER
        # before its first token, or preempted: the step that makes it (or resumes) wakes it
        self.waits_first = index >= NEVER
        if not self.waits_first:
            rep.wait_for(index, fut)
        return fut

    def listen(self, callback: Callable[[int, int], bool] | None) -> bool:
        """Push mode: instead of a reader awaiting ``ready``, the replica takes the tokens
        (``take``) inside the step that produces the last token of the next event and calls
        ``callback(start, count)`` with them; ``count`` is 0 once the stream is over (all
        handed out, cancelled, replica stopped: one last call). The callback returns True to be
        called again, False to stop listening; it must not raise (one that does is logged and
        its stream cancelled; the replica goes on). ``listen(None)`` stops. Call
        it after ``take`` gave nothing; False if push mode cannot start (tokens waiting, or the
        stream is over): the reader then waits with ``ready``. Before the first token, the
        replica's step that makes it calls ``first_token``, which arms the listener then, so
        the first event is pushed too (the reader's task is not woken for it)."""
        if callback is None:
            self._listener = None
            return True
        if self.over:
            return False
        if self.seq.first_step < 0:
            self.waits_first = True
        elif not self._arm():
            return False
        self._listener = callback
        return True

    def first_token(self) -> None:
        """The replica's call at the step that made this stream's first token (or its next
        one after a preemption), if its reader waits for it: a listener is armed for its next
        event (or given it now, if that step made it due: one event per token); a reader
        awaiting ``ready`` is woken."""
        self.waits_first = False
        if self._listener is None:
            self.wake()
        elif not self._arm():
            self.deliver()

    def _arm(self) -> bool:
        """Register with the replica for the step that makes the next event due; False if that
        step is done already (there are tokens to take)."""
        index = self.due_step()
        rep = self.replica
        if index >= NEVER:  # preempted: the step that resumes it arms it again
            self.waits_first = True
            return True
        if index <= rep.done_index:
            return False
        rep.wait_for(index, self)
        return True

    def deliver(self) -> None:
        """The replica's call at the step this stream listened for: ``take``, the listener,
        and re-arming for the next event, in one call (this runs once per event of every
        stream in push mode: ``take`` and ``over`` are inlined). A listener that raises is a
        bug of its own: logged, its stream ended, never the replica's step broken."""
        callback = self._listener
        if callback is None:
            return  # stopped listening since
        # ``take``, inline (the step this stream armed for is done: its first step is known)
        seq, rep = self.seq, self.replica
        first, out, delivered, interval = seq.first_step, seq.output_tokens, self.delivered, \
            self.interval
        n = 0
        segments = seq.segments
        if segments is not None:  # preempted once at least: the tokens' steps are looked up
            n = self.take()
            delivered = self.delivered
        elif first >= 0 and not self._cancelled:
            done = rep.done_index
            produced = done - first + 1
            if produced > out:
                produced = out
            n = produced - delivered
            if n < interval and produced < out or n <= 0:
                n = 0
            else:
                if interval > 1 and produced < out:
                    n -= n % interval  # whole events only; the rest is not due yet
                start, delivered = delivered, delivered + n
                self.delivered = delivered
                self._i0, self.since = self._i1, self._t1
                self._i1, self._t1 = done, rep.done_end
                if start <= self.watch < delivered:
                    self.watched_at = self._time(first + self.watch)
        try:
            again = callback(delivered - n, n)
            if self._listener is not callback:
                return  # it stopped listening itself
            if not again:
                self._listener = None
                return
            # ``due_step``, inline: the step making the next event's last token
            want = delivered + interval
            index = (first + (want if want < out else out) - 1 if segments is None
                     else self.due_step())
            if (delivered >= out or self._cancelled or seq.state == CANCELLED
                    or rep.stopped or index <= rep.done_index):  # over, or due already: the end
                self._listener = None
                callback(delivered, 0)  # the last call
                return
            if segments is not None and index >= NEVER:  # preempted: armed again by the
                self.waits_first = True  # step that resumes it
                return
        except Exception:  # a broken listener must not stop the replica: end its stream
            log.exception("stream listener failed")
            self._listener = None
            self.cancel()
            return
        # re-armed for the next event (``wait_for``, inline: this runs once per event)
        at = rep.listening
        streams = at.get(index)
        if streams is None:
            at[index] = [self]
        else:
            streams.append(self)

    @property
    def over(self) -> bool:
        """No more tokens will be handed out: all were, or the stream or replica stopped."""
        seq = self.seq
        return (self._cancelled or self.replica.stopped or seq.state == CANCELLED
                or self.delivered >= seq.output_tokens)

    # -- modeled times --------------------------------------------------------------------

    def _time(self, step: int) -> float:
        """Modeled end of replica step ``step`` among this stream's (see the class docstring)."""
        seq = self.seq
        if step >= self._i1:
            return self._t1
        if step <= seq.first_step:
            return seq.first_token_at
        if step == seq.step_of(seq.output_tokens - 1) and seq.finished_at >= 0:
            return seq.finished_at
        if step >= self._i0 >= 0:
            lo, tlo = self._i0, self.since
        else:
            lo, tlo = seq.first_step, seq.first_token_at
        return tlo + (self._t1 - tlo) * (step - lo) / (self._i1 - lo)

    @property
    def last_at(self) -> float:
        """Modeled time of the last token handed out (-1 before the first)."""
        if not self.delivered:
            return -1.0
        return self._time(self.seq.step_of(self.delivered - 1))

    def token_at(self, k: int) -> float:
        """Modeled time of token ``k`` (one already handed out)."""
        return self._time(self.seq.step_of(k))

    def due_at(self, start: int, count: int) -> float:
        """When the first event of tokens ``start .. start + count`` was due: its last token's
        modeled time."""
        return self._time(self.seq.step_of(start + min(self.interval, count) - 1))

    def host_lag(self) -> tuple[float, float]:
        """Seconds the host added to this request's modeled times (its replica's timeline
        slipped, ``backends.drivers.realtime``): in all, and the part of it between the first
        token and the last (what slowed its tokens, not its first one). Up to now for a
        request not finished."""
        now = self.replica.slipped
        end = self.lag_end if self.lag_end >= 0 else now
        first = self.lag_first if self.lag_first >= 0 else end
        return end - self._lag0, end - first

    @property
    def finished(self) -> bool:
        return self.delivered >= self.seq.output_tokens

    def produced(self) -> int:
        """Tokens the engine has produced so far: those delivered and those made but not yet
        taken (a planned step runs ahead: only steps done count)."""
        seq = self.seq
        if seq.first_step < 0:
            return self.delivered
        return max(self.delivered, seq.tokens_after(self.replica.done_index))

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            self.replica.cancel(self.seq)
            self.wake()
            self.unlink()

    def unlink(self) -> None:
        """The request left the engine (its last step was reported, or it was cancelled):
        the sequence's tag (this stream) and this stream's (the caller's) are dropped. Linked
        both ways (the sequence's tag is the stream, which holds the sequence and the caller's
        tag, which holds the stream), the reader's objects would be garbage only the cyclic
        collector finds, one cycle per request: its collections took 41-50 us of a short
        request's ~300 us of CPU in process and held the loop up to 12 ms (docs/streaming.md,
        "Where the time goes"; tests/gateway/test_no_cycles.py).
        Unlinked, they are freed by reference counting when the reader is done with them.
        Nothing reads either tag after the request left: the step's ``on_step`` reads them
        before."""
        if self.seq.tag is self:
            self.seq.tag = None
        self.tag = None

    def move(self, seq: Sequence, replica: StreamReplica) -> None:
        """The request failed over before its first token (``backends.drivers.supervisor``):
        its tokens now come from ``seq`` on ``replica``; a reader waiting for the first token
        is woken by that replica."""
        self.seq, self.replica = seq, replica
        self._lag0 = replica.slipped  # (what the failed replica slipped before is not counted)

    def wake(self) -> None:
        """End the reader's wait (it then looks again: a cancelled stream ends); a listener is
        called one last time."""
        listener = self._listener
        if listener is not None:
            self._listener = None
            try:
                listener(self.delivered, 0)
            except Exception:
                log.exception("stream listener failed")
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def aclose(self) -> None:
        self.cancel()
