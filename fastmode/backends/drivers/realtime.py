"""The real-time clock: replicas step against the event loop's clock, tokens stream to readers.

Serving is the scheduler's timeline played at wall-clock speed. Each replica is one asyncio task
that plans a step, sleeps until the step's modeled end, then marks the step done: one timer per
replica step, never one per token or per stream, so a thousand streams cost what one does in
timers. The replica does not walk the batch: a reader knows how many of its tokens exist from
the step index alone (a sequence has ``done_index - first_step + 1``; one that was preempted
counts per segment of steps, ``backends.sequence``), so it waits for the one step that produces
the last token of its next event, and after each step the replica wakes the readers that waited
for that step (and those whose first token it was, or whose preempted sequence resumed in it):
readers wake once per event, never per step, and a step costs nothing for the sequences whose event is not due. A
reader that falls behind gets every token due in one item instead of slowing the replica down.

A reader can also *listen* (``TokenStream.listen``): the replica then calls it inside the step
that makes its next event due, and the reader writes the event there and then: no future, no
task switch, no coroutine resumed per event. The gateway streams that way while its writes
complete at once (a reader that keeps up), and falls back to waiting when one does not.

``interval`` (a tier's ``stream_interval``, vLLM's name for the knob) is how many tokens make
one event: a reader is woken when its next ``interval`` tokens exist, i.e. when the last token
of its next event is due, and at the end for the remainder.

**A late replica slips, it never catches up.** When a step is served later than its modeled end
(an admission burst held the event loop, the host is busy), running the late steps back to back
until the replica is on its timeline again would hand every stream a burst of tokens faster
than the model: a client measuring inter-token latency would see a faster server than the one
modeled. So a step served more than ``PACING_TOLERANCE_S`` late (beyond the event loop's timer
granularity: uvloop keeps time in milliseconds) makes its lateness latency: its modeled end
moves to when it was served, the model's timeline shifts by the slip (the tokens of that step,
the first tokens and finishes it produced, the next step's start), and the following steps keep
their modeled durations. A stream sees one longer gap, then the modeled inter-token latency
again: it is never ahead of its modeled timeline, and behind it by at most the tolerance
(lateness up to it is made up by the next sleep, a gap at most that much shorter). Each slip is
reported once (``on_lag``: the gateway's ``fastmode_host_lag_seconds``); it costs one compare
per step and nothing when the host keeps up. The virtual driver has no host and never slips;
neither does a replica on a scaled clock (``clock.py``), which catches up instead.

A replica's task never ends unseen: if it ends other than by ``stop`` (an exception escaped a
step, or something cancelled it), its ``on_exit`` is called; the driver's ``Supervisor``
(``supervisor.py``) logs and reports it, fails over or ends its requests, and restarts it, and
also catches a replica that holds work but stopped stepping (a lost wake-up).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping

from fastmode.backends.drivers.base import Driver, cancel_and_wait
from fastmode.backends.drivers.clock import ScaledClock
from fastmode.backends.drivers.live import LiveReplica
from fastmode.backends.drivers.supervisor import FailureCallback, Supervisor
from fastmode.backends.drivers.token_stream import TokenStream
from fastmode.backends.engine import DeploymentSpec
from fastmode.backends.fleet import FleetSpec
from fastmode.backends.prefix_cache import PrefixKey
from fastmode.backends.scheduler import Scheduler, Sequence, StepResult

StepCallback = Callable[["RealtimeReplica", StepResult], None]
ExitCallback = Callable[["RealtimeReplica", BaseException], None]
LagCallback = Callable[["RealtimeReplica", float], None]

PACING_TOLERANCE_S = 0.002
"""How late a step may be served before the replica's timeline slips, seconds: the event loop's
timer granularity (uvloop keeps time and timers in whole milliseconds) with a millisecond to
spare. Lateness up to it is made up by the next sleep (a gap at most this much shorter than
modeled); beyond it the timeline slips by all of it."""

log = logging.getLogger("fastmode.engine")


class RealtimeReplica(LiveReplica):
    """One replica stepped by an asyncio task against the event loop's clock.

    ``done_index`` / ``done_end`` are the index and modeled end of the last step whose tokens
    exist (the scheduler plans a step before its end is reached, so its own step index runs one
    ahead while a step is in flight)."""

    __slots__ = ("on_step", "on_exit", "on_lag", "clock", "scale", "loop", "done_index",
                 "done_end", "late", "slips", "slipped", "stopped", "listening", "_at", "_wake",
                 "_task")

    def __init__(
        self,
        scheduler: Scheduler,
        name: str = "",
        deployment: str = "",
        on_step: StepCallback | None = None,
        on_exit: ExitCallback | None = None,
        on_lag: LagCallback | None = None,
        clock: ScaledClock | None = None,
    ) -> None:
        super().__init__(scheduler, name, deployment)
        self.on_step = on_step
        self.on_exit = on_exit  # the loop ended by itself (the supervisor's ``exited``)
        self.on_lag = on_lag  # a slip: (replica, seconds the timeline moved), once per slip
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.loop = asyncio.get_running_loop()
        scaled = clock if clock is not None else ScaledClock(self.loop.time)
        self.clock = scaled.now  # modeled seconds (the loop's clock at time scale 1)
        self.scale = scaled.scale  # wall seconds per modeled second
        self.done_index = -1
        self.done_end = 0.0
        self.late = 0.0  # how far behind its modeled timeline the last step was served
        self.slips = 0  # times the timeline slipped ...
        self.slipped = 0.0  # ... and by how much in all, seconds
        self.stopped = False
        # step index -> readers due then: their futures, and apart from them the listening
        # streams (push mode), which re-arm themselves here (``TokenStream.deliver``): a step
        # calls each of these without asking which kind it is
        self._at: dict[int, list[asyncio.Future[None]]] = {}
        self.listening: dict[int, list[TokenStream]] = {}

    def wait_for(self, index: int, fut: asyncio.Future[None] | TokenStream) -> None:
        """Resolve ``fut`` (or call a listening stream) when step ``index`` is done. Each
        reader has its own future: a reader's task cancelled while waiting cancels only its
        own."""
        if isinstance(fut, TokenStream):
            streams = self.listening.get(index)
            if streams is None:
                self.listening[index] = [fut]
            else:
                streams.append(fut)
            return
        waiters = self._at.get(index)
        if waiters is None:
            self._at[index] = [fut]
        else:
            waiters.append(fut)

    @property
    def alive(self) -> bool:
        """Its loop task is alive (False before ``start``, after ``stop`` or a failure)."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start (or, after a failure, restart) the loop on this replica's scheduler."""
        if self._task is None:
            self.stopped = False
            task = self._task = self.loop.create_task(self._run(), name=f"replica-{self.name}")
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The loop task ended. By ``stop`` or ``halt`` (they let go of it first): nothing to
        do. By itself (the loop never returns): an exception escaped, or a cancellation
        that was not ours; either way the replica stopped stepping, so it is reported."""
        if task is not self._task:
            return
        self._task = None
        error = (asyncio.CancelledError("the replica's loop task was cancelled")
                 if task.cancelled() else task.exception())
        if error is None:  # (unreachable: the loop only ends by raising)
            error = RuntimeError("the replica's loop returned")
        if self.on_exit is not None:
            self.on_exit(self, error)
        else:
            log.error("replica %s stopped stepping", self.name, exc_info=error)

    def halt(self) -> None:
        """Cancel a loop that stopped stepping (the supervisor's liveness check), without
        reporting it as a failure of its own."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self.stopped = True  # readers still waiting end instead of hanging
        self.release_readers()
        sched = self.scheduler
        for seq in (*sched.waiting, *sched.prefilling, *sched.decoding.values()):
            if isinstance(seq.tag, TokenStream):
                seq.tag.wake()

    def release_readers(self) -> None:
        """End every registered wait: each reader looks at its stream again (and waits anew,
        takes its tokens, or ends if the stream is over)."""
        waiting, self._at = self._at, {}
        listening, self.listening = self.listening, {}
        for streams in listening.values():
            for stream in streams:
                stream.wake()
        for futs in waiting.values():
            for fut in futs:
                if not fut.done():
                    fut.set_result(None)

    def wake(self) -> None:
        """New work or a cancellation: the loop re-plans (an idle replica starts stepping)."""
        self._wake.set()

    def cancel(self, seq: Sequence) -> None:
        self.scheduler.cancel(seq)
        self._wake.set()

    async def _run(self) -> None:
        sched = self.scheduler
        clock = self.clock
        scale = self.scale
        # a scaled clock never slips (clock.py): its timeline is the model's, host or not
        tolerance = PACING_TOLERANCE_S if scale == 1.0 else math.inf
        while True:
            if not sched.has_work:
                self._wake.clear()
                await self._wake.wait()
            result = self.step()
            if result is None:
                # only cancelled work was left, or what waits does not fit yet beside the other
                # tenants' KV: wait for a change (never plan again at once: that spins)
                self._wake.clear()
                if sched.has_work:
                    await self._idle_with_work()
                continue
            delay = result.end - clock()
            if delay > 0:
                await asyncio.sleep(delay * scale)
            else:
                await asyncio.sleep(0)  # behind the modeled timeline: let writers flush
            late = clock() - result.end
            if late > tolerance:
                self._slip(result, late)
                late = 0.0
            self.late = late
            self.steps += 1
            self.last_batch = result.batch
            self._deliver(result)
            if self.on_step is not None:
                self.on_step(self, result)
            for seq in result.finished:  # it left the engine: see TokenStream.unlink
                stream = seq.tag
                if isinstance(stream, TokenStream):
                    stream.unlink()

    async def _idle_with_work(self) -> None:
        """Nothing could be planned though requests wait: until a wake-up (new work, a
        cancellation) or the other tenants' next tick (their load, so the room, moves then),
        after which the replica's next step starts no earlier than now."""
        t = self.tenants
        if t is None:
            await self._wake.wait()
        else:
            try:
                await asyncio.wait_for(self._wake.wait(),
                                       max(0.0, t.next_tick - self.clock()) * self.scale)
            except TimeoutError:
                pass
        self.next_start = max(self.next_start, self.clock())

    def _slip(self, result: StepResult, by: float) -> None:
        """The step was served ``by`` seconds after its modeled end: shift the model's
        timeline by that much from this step on (see the module doc) and report it. O(1) plus
        the sequences this step started or ended."""
        result.end += by
        result.slip = by
        for seq in result.first_tokens:
            seq.first_token_at += by
        for seq in result.finished:
            seq.finished_at += by
        if self.next_start < result.end:  # (the next step starts where this one ends)
            self.next_start = result.end
        sched = self.scheduler
        if sched.busy_until < result.end:
            sched.busy_until = result.end
        self.slips += 1
        self.slipped += by
        if self.on_lag is not None:
            try:
                self.on_lag(self, by)
            except Exception:  # a broken report must not stop the replica
                log.exception("replica %s: reporting its host lag failed", self.name)

    def _deliver(self, result: StepResult) -> None:
        """The step's tokens exist: wake the readers due now. O(1) plus one call per sequence
        whose first or last token this was; nothing per sequence of the batch."""
        index = self.done_index = result.index
        self.done_end = result.end
        streams = self.listening.pop(index, None)
        if streams is not None:
            for stream in streams:
                stream.deliver()  # a listener writes its event now
        futs = self._at.pop(index, None)
        if futs is not None:
            for fut in futs:
                if not fut.done():
                    fut.set_result(None)
        slipped = self.slipped  # each request's host lag is read off these marks
        for seq in result.first_tokens:
            stream = seq.tag
            if isinstance(stream, TokenStream):
                stream.lag_first = slipped
                if stream.waits_first:
                    stream.first_token()
        for seq in result.resumed:  # preempted, making tokens again: its reader waits for it
            stream = seq.tag
            if isinstance(stream, TokenStream) and stream.waits_first:
                stream.first_token()
        for seq in result.finished:
            stream = seq.tag
            if isinstance(stream, TokenStream):
                stream.lag_end = slipped


class RealtimeDriver(Driver[RealtimeReplica]):
    """Replicas of some deployments, each stepped by its own task on the running event loop.

    A submitted sequence's ``tag`` is its ``TokenStream`` (where the replica sends its tokens);
    the caller's tag rides on the stream. ``on_step(replica, result)`` runs after every step.
    ``supervisor`` watches every replica's task (``on_failure``: what the caller does when one
    fails, e.g. count it). ``on_lag(replica, seconds)`` is told of every slip of any replica,
    those a fleet adds later included (it may be set after the driver is built).
    ``time_scale``: wall seconds per modeled second (``clock.py``; or a ``clock`` of its own).
    Must be built inside a running event loop.
    """

    def __init__(
        self, deployments: Mapping[str, DeploymentSpec], on_step: StepCallback | None = None,
        fleet: FleetSpec | None = None, on_failure: FailureCallback | None = None,
        on_lag: LagCallback | None = None, time_scale: float = 1.0,
        clock: ScaledClock | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.clock = clock if clock is not None else ScaledClock(self._loop.time, time_scale)
        self._on_step = on_step
        self.on_lag = on_lag
        self.supervisor = Supervisor(self, on_failure)
        super().__init__(deployments, fleet)

    def _new_replica(self, scheduler: Scheduler, name: str, deployment: str) -> RealtimeReplica:
        return RealtimeReplica(scheduler, name, deployment, self._on_step,
                               self.supervisor.exited, self._lagged, self.clock)

    def _lagged(self, replica: RealtimeReplica, seconds: float) -> None:
        if self.on_lag is not None:
            self.on_lag(replica, seconds)

    @property
    def now(self) -> float:
        """Modeled seconds (the loop's clock at time scale 1)."""
        return self.clock.now()

    def start(self) -> None:
        for r in self.replicas:
            r.start()
        self.supervisor.start()

    async def stop(self) -> None:
        await self.supervisor.stop()
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
