"""The real-time clock: replicas step against the event loop's clock, tokens stream to readers.

Serving is the scheduler's timeline played at wall-clock speed. Each replica is one asyncio task
that plans a step, sleeps until the step's modeled end, then hands every sequence in the batch
its token: one timer per replica step, never one per token or per stream, so a thousand streams
cost what one does in timers. A reader that falls behind gets several tokens in one item instead
of slowing the replica down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from ..engine import DeploymentSpec
from ..scheduler import CANCELLED, Scheduler, Sequence, StepResult
from .base import Driver, Replica

StepCallback = Callable[["RealtimeReplica", StepResult], None]


class TokenStream:
    """The tokens of one request as they are produced: an async iterator of timestamp batches.

    Each item is the list of modeled times (driver clock, seconds) of the tokens produced since
    the previous item; when the consumer falls behind, one item carries several tokens. Closing
    the stream (``aclose`` or ``cancel``) cancels the request in the engine: its slot and KV are
    free at the next step. ``tag`` is the caller's, from ``RealtimeDriver.submit``.
    """

    __slots__ = ("seq", "replica", "tag", "_times", "_waiter", "_done")

    def __init__(self, seq: Sequence, replica: RealtimeReplica, tag: Any = None) -> None:
        self.seq = seq
        self.replica = replica
        self.tag = tag
        self._times: list[float] = []
        self._waiter: asyncio.Future[None] | None = None
        self._done = False

    # called by the replica loop
    def _push(self, t: float, last: bool) -> None:
        self._times.append(t)
        if last:
            self._done = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> list[float]:
        while not self._times:
            if self._done or self.seq.state == CANCELLED:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        out, self._times = self._times, []
        return out

    @property
    def finished(self) -> bool:
        return self._done and not self._times

    def cancel(self) -> None:
        if not self._done:
            self._done = True
            self.replica.cancel(self.seq)
            w = self._waiter
            if w is not None and not w.done():
                w.set_result(None)  # a reader waiting for tokens ends instead of hanging

    async def aclose(self) -> None:
        self.cancel()


class RealtimeReplica(Replica):
    """One replica stepped by an asyncio task against the event loop's clock."""

    __slots__ = ("on_step", "clock", "_wake", "_task", "_loop")

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
        self._loop = asyncio.get_running_loop()
        self.clock = self._loop.time

    def start(self) -> None:
        if self._task is None:
            self._task = self._loop.create_task(self._run(), name=f"replica-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

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
        end = result.end
        for seq in result.finished:
            seq.tag._push(end, True)
        for seq in self.scheduler.decoding.values():  # includes this step's first tokens
            seq.tag._push(end, False)


class RealtimeDriver(Driver[RealtimeReplica]):
    """Replicas of some deployments, each stepped by its own task on the running event loop.

    A submitted sequence's ``tag`` is its ``TokenStream`` (where the replica sends its tokens);
    the caller's tag rides on the stream. ``on_step(replica, result)`` runs after every step.
    Must be built inside a running event loop.
    """

    def __init__(
        self, deployments: Mapping[str, DeploymentSpec], on_step: StepCallback | None = None
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_step = on_step
        super().__init__(deployments)

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
        self, deployment: str, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0
    ) -> TokenStream:
        """``submit`` and return the request's token stream; raises Overloaded or TooLarge."""
        stream: TokenStream = self.submit(
            deployment, prompt_tokens, output_tokens, cached_tokens
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

    def submit(self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> TokenStream:
        """Queue a request on the least-loaded replica; raises Overloaded or TooLarge."""
        return self.driver.open(self.spec.name, prompt_tokens, output_tokens, cached_tokens)
