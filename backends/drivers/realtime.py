"""The real-time clock: replicas step against the event loop's clock, tokens stream to readers.

Serving is the scheduler's timeline played at wall-clock speed. Each replica is one asyncio task
that plans a step, sleeps until the step's modeled end, then marks the step done: one timer per
replica step, never one per token or per stream, so a thousand streams cost what one does in
timers. The replica does not walk the batch: a reader knows how many of its tokens exist from
the step index alone (a sequence has ``done_index - first_step + 1``), so it waits for the one
step that produces the last token of its next event, and after each step the replica wakes the
readers that waited for that step (and those whose first token it was): readers wake once per
event, never per step, and a step costs nothing for the sequences whose event is not due. A
reader that falls behind gets every token due in one item instead of slowing the replica down.

A reader can also *listen* (``TokenStream.listen``): the replica then calls it inside the step
that makes its next event due, and the reader writes the event there and then: no future, no
task switch, no coroutine resumed per event. The gateway streams that way while its writes
complete at once (a reader that keeps up), and falls back to waiting when one does not.

``interval`` (a tier's ``stream_interval``, vLLM's name for the knob) is how many tokens make
one event: a reader is woken when its next ``interval`` tokens exist, i.e. when the last token
of its next event is due, and at the end for the remainder.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..engine import DeploymentSpec
from ..fleet import FleetSpec
from ..prefix_cache import PrefixKey
from ..scheduler import CANCELLED, Scheduler, Sequence, StepResult
from .base import Driver, Replica

log = logging.getLogger("fastmode.engine")

StepCallback = Callable[["RealtimeReplica", StepResult], None]


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
                 "_cancelled", "_fut", "_first", "_i0", "_i1", "_t1", "_listener")

    def __init__(self, seq: Sequence, replica: RealtimeReplica, tag: Any = None,
                 interval: int = 1) -> None:
        self.seq = seq
        self.replica = replica
        self.tag = tag
        self.interval = interval
        self.delivered = 0
        self._cancelled = False
        self._fut: asyncio.Future[None] | None = None  # what the reader waits on
        self._first = False  # ... and it is the first token (the replica wakes it then)
        self._i0 = self._i1 = -1  # replica step index at the previous read and at the last
        self.since = self._t1 = 0.0  # ... and their modeled ends
        # no event of the next item was due before ``since`` (the reader took all due ones):
        # a cheap lower bound of ``due_at`` for a lag check
        self.watch = -1  # a token whose exact time to keep (``watched_at``) when handed out
        self.watched_at = -1.0
        self._listener: Callable[[], bool] | None = None  # push mode (``listen``)

    def take(self) -> int:
        """Hand out the tokens due now: a multiple of ``interval`` (the events whose last token
        exists), or at the end the remainder; 0 if none. The hot loop (``gateway.turn``) calls
        this and ``ready`` itself, so an item costs no coroutine of its own."""
        seq = self.seq
        first = seq.first_step
        if first < 0 or self._cancelled:
            return 0
        out, delivered, interval = seq.output_tokens, self.delivered, self.interval
        done = self.replica.done_index
        produced = done - first + 1
        if produced > out:
            produced = out
        n = produced - delivered
        if n < interval and produced < out or n <= 0:
            return 0
        if produced < out:
            n -= n % interval  # whole events only; the rest is not due yet
        self.delivered = delivered + n
        self._i0, self.since = self._i1, self._t1
        self._i1, self._t1 = done, self.replica.done_end
        if delivered <= self.watch < delivered + n:
            self.watched_at = self._time(first + self.watch)
        return n

    def ready(self) -> asyncio.Future[None] | None:
        """After ``take`` gave nothing: the future to await before tokens are due (the step
        producing the last token of the next event; the first token's step before decoding
        starts), or None when the stream is over (all handed out, cancelled, stopped)."""
        seq, rep = self.seq, self.replica
        out = seq.output_tokens
        if self._cancelled or rep.stopped or seq.state == CANCELLED or self.delivered >= out:
            return None
        fut = self._fut = rep.loop.create_future()
        first = seq.first_step
        self._first = first < 0
        if first >= 0:
            want = self.delivered + self.interval
            rep.wait_for(first + (want if want < out else out) - 1, fut)
        return fut

    def listen(self, callback: Callable[[], bool] | None) -> bool:
        """Push mode: instead of a reader awaiting ``ready``, the replica calls ``callback()``
        inside the step that produces the last token of the next event (and once if the stream
        ends another way: cancelled, replica stopped). The callback takes the tokens (``take``)
        and returns True to be called again at the following event, False to stop listening;
        it must not raise. ``listen(None)`` stops. Call it after ``take`` gave nothing; False
        if push mode cannot start (no first token yet, tokens waiting, or the stream is over):
        the reader then waits with ``ready``."""
        if callback is None:
            self._listener = None
            return True
        if self.seq.first_step < 0 or self.over or not self._arm():
            return False
        self._listener = callback
        return True

    def _arm(self) -> bool:
        """Register with the replica for the step that makes the next event due; False if that
        step is done already (there are tokens to take)."""
        seq, rep = self.seq, self.replica
        out = seq.output_tokens
        want = self.delivered + self.interval
        index = seq.first_step + (want if want < out else out) - 1
        if index <= rep.done_index:
            return False
        rep.wait_for(index, self)
        return True

    def _push(self) -> None:
        """The replica's call at the step this stream listened for."""
        callback = self._listener
        if callback is None:
            return  # stopped listening since
        try:
            again = callback()
        except Exception:  # a broken listener must not stop the replica: end its stream
            log.exception("stream listener failed")
            self._listener = None
            self.cancel()
            return
        if self._listener is not callback:
            return  # it stopped listening itself
        if not again:
            self._listener = None
        elif self.over or not self._arm():  # it expects another call that will not come:
            self._listener = None
            callback()  # it looks once more (nothing to take) and ends

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
        if step == seq.first_step + seq.output_tokens - 1 and seq.finished_at >= 0:
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
        return self._time(self.seq.first_step + self.delivered - 1)

    def token_at(self, k: int) -> float:
        """Modeled time of token ``k`` (one already handed out)."""
        return self._time(self.seq.first_step + k)

    def due_at(self, start: int, count: int) -> float:
        """When the first event of tokens ``start .. start + count`` was due: its last token's
        modeled time."""
        return self._time(self.seq.first_step + start + min(self.interval, count) - 1)

    @property
    def finished(self) -> bool:
        return self.delivered >= self.seq.output_tokens

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            self.replica.cancel(self.seq)
            self._wake()

    def _wake(self) -> None:
        """End the reader's wait (it then looks again: a cancelled stream ends); a listener is
        called one last time."""
        listener = self._listener
        if listener is not None:
            self._listener = None
            try:
                listener()
            except Exception:
                log.exception("stream listener failed")
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def aclose(self) -> None:
        self.cancel()


class RealtimeReplica(Replica):
    """One replica stepped by an asyncio task against the event loop's clock.

    ``done_index`` / ``done_end`` are the index and modeled end of the last step whose tokens
    exist (the scheduler plans a step before its end is reached, so its own step index runs one
    ahead while a step is in flight)."""

    __slots__ = ("on_step", "clock", "loop", "done_index", "done_end", "stopped", "_at", "_wake",
                 "_task")

    def __init__(
        self,
        scheduler: Scheduler,
        name: str = "",
        deployment: str = "",
        on_step: StepCallback | None = None,
    ) -> None:
        super().__init__(scheduler, name, deployment)
        self.on_step = on_step
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.loop = asyncio.get_running_loop()
        self.clock = self.loop.time
        self.done_index = -1
        self.done_end = 0.0
        self.stopped = False
        # step index -> readers due then: their futures, or listening streams (push mode)
        self._at: dict[int, list[asyncio.Future[None] | TokenStream]] = {}

    def wait_for(self, index: int, fut: asyncio.Future[None] | TokenStream) -> None:
        """Resolve ``fut`` (or call a listening stream) when step ``index`` is done. Each
        reader has its own future: a reader's task cancelled while waiting cancels only its
        own."""
        waiters = self._at.get(index)
        if waiters is None:
            self._at[index] = [fut]
        else:
            waiters.append(fut)

    def start(self) -> None:
        if self._task is None:
            self.stopped = False
            self._task = self.loop.create_task(self._run(), name=f"replica-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self.stopped = True  # readers still waiting end instead of hanging
        waiting, self._at = self._at, {}
        for futs in waiting.values():
            for fut in futs:
                if isinstance(fut, TokenStream):
                    fut._wake()
                elif not fut.done():
                    fut.set_result(None)
        sched = self.scheduler
        for seq in (*sched.waiting, *sched.prefilling, *sched.decoding.values()):
            if isinstance(seq.tag, TokenStream):
                seq.tag._wake()

    def wake(self) -> None:
        """New work or a cancellation: the loop re-plans (an idle replica starts stepping)."""
        self._wake.set()

    def cancel(self, seq: Sequence) -> None:
        self.scheduler.cancel(seq)
        self._wake.set()

    async def _run(self) -> None:
        sched = self.scheduler
        clock = self.clock
        while True:
            if not sched.has_work:
                self._wake.clear()
                await self._wake.wait()
            result = self.step()
            if result is None:
                # only cancelled work was left; wait for more
                self._wake.clear()
                continue
            delay = result.end - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # behind the modeled timeline: let writers flush
            self.steps += 1
            self.last_batch = result.batch
            self._deliver(result)
            if self.on_step is not None:
                self.on_step(self, result)

    def _deliver(self, result: StepResult) -> None:
        """The step's tokens exist: wake the readers due now. O(1) plus one call per sequence
        whose first token this was; nothing per sequence of the batch."""
        self.done_index, self.done_end = result.index, result.end
        futs = self._at.pop(result.index, None)
        if futs is not None:
            for fut in futs:
                if isinstance(fut, TokenStream):
                    fut._push()  # a listener writes its event now
                elif not fut.done():
                    fut.set_result(None)
        for seq in result.first_tokens:
            stream = seq.tag
            if isinstance(stream, TokenStream) and stream._first:
                stream._wake()


class RealtimeDriver(Driver[RealtimeReplica]):
    """Replicas of some deployments, each stepped by its own task on the running event loop.

    A submitted sequence's ``tag`` is its ``TokenStream`` (where the replica sends its tokens);
    the caller's tag rides on the stream. ``on_step(replica, result)`` runs after every step.
    Must be built inside a running event loop.
    """

    def __init__(
        self, deployments: Mapping[str, DeploymentSpec], on_step: StepCallback | None = None,
        fleet: FleetSpec | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_step = on_step
        super().__init__(deployments, fleet)

    def _new_replica(self, scheduler: Scheduler, name: str, deployment: str) -> RealtimeReplica:
        return RealtimeReplica(scheduler, name, deployment, self._on_step)

    @property
    def now(self) -> float:
        return self._loop.time()

    def start(self) -> None:
        for r in self.replicas:
            r.start()

    async def stop(self) -> None:
        for r in self.replicas:
            await r.stop()

    def open(
        self, deployment: str, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0,
        prefix: PrefixKey | None = None,
    ) -> TokenStream:
        """``submit`` and return the request's token stream; raises Overloaded or TooLarge."""
        stream: TokenStream = self.submit(
            deployment, prompt_tokens, output_tokens, cached_tokens, prefix=prefix
        ).tag
        return stream

    def _accepted(self, replica: RealtimeReplica, seq: Sequence) -> None:
        seq.tag = TokenStream(seq, replica, seq.tag)
        replica.wake()

    def cancel(self, seq: Sequence) -> None:
        stream = seq.tag
        if isinstance(stream, TokenStream):
            stream.cancel()  # also ends a reader waiting on the stream


class RealtimeDeployment:
    """One deployment on the real-time clock: the handle the gateway keeps per deployment."""

    def __init__(self, spec: DeploymentSpec, on_step: StepCallback | None = None) -> None:
        self.spec = spec
        self.driver = RealtimeDriver({spec.name: spec}, on_step)
        self.replicas = self.driver.by_deployment[spec.name]

    def start(self) -> None:
        self.driver.start()

    async def stop(self) -> None:
        await self.driver.stop()

    def submit(self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0,
               prefix: PrefixKey | None = None) -> TokenStream:
        """Queue a request on the replica ``choose`` picks; raises Overloaded or TooLarge."""
        return self.driver.open(self.spec.name, prompt_tokens, output_tokens, cached_tokens,
                                prefix)

    def choose(self, prefix: PrefixKey | None = None, prompt_tokens: int = 0) -> RealtimeReplica:
        """The replica ``submit`` would pick now (admission models its queue beforehand)."""
        return self.driver.choose(self.spec.name, prefix, prompt_tokens)
