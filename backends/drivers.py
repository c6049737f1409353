"""Two clocks for one scheduler: real time (asyncio, for serving) and virtual time (simulation).

Both drive the same ``Scheduler`` objects the same way — a replica plans a step at the time its
previous step ended (or when work arrives at an idle replica) — so for the same arrivals they
produce the same timeline. Only the way time passes differs: the real-time driver sleeps until a
step's modeled end, once per replica step (never a timer per token or per stream); the virtual
driver jumps from event to event.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .engine import DeploymentSpec
from .scheduler import CANCELLED, Scheduler, Sequence, StepResult


class Overloaded(Exception):
    """Every replica's waiting queue is full."""


class TooLarge(Exception):
    """The request's KV would not fit a replica even when idle."""


_ids = itertools.count(1)


def new_sequence(
    prompt_tokens: int, output_tokens: int, arrival: float, cached_tokens: int = 0, tag=None
) -> Sequence:
    if prompt_tokens <= 0 or output_tokens <= 0:
        raise ValueError("prompt_tokens and output_tokens must be positive")
    if not 0 <= cached_tokens < prompt_tokens:
        cached_tokens = max(0, min(cached_tokens, prompt_tokens - 1))
    return Sequence(next(_ids), prompt_tokens, output_tokens, arrival, cached_tokens, tag)


def pick_replica(schedulers: Iterable[Scheduler]) -> Scheduler:
    """Least outstanding work: fewest running plus waiting sequences, first on ties."""
    return min(schedulers, key=lambda s: s.running + len(s.waiting))


# ---------------------------------------------------------------------------------------------
# Real time
# ---------------------------------------------------------------------------------------------


class TokenStream:
    """The tokens of one request as they are produced: an async iterator of timestamp batches.

    Each item is the list of modeled times (driver clock, seconds) of the tokens produced since
    the previous item; when the consumer falls behind, one item carries several tokens. Closing
    the stream (``aclose`` or ``cancel``) cancels the request in the engine: its slot and KV are
    free at the next step.
    """

    __slots__ = ("seq", "replica", "_times", "_waiter", "_done")

    def __init__(self, seq: Sequence, replica: RealtimeReplica) -> None:
        self.seq = seq
        self.replica = replica
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


class RealtimeReplica:
    """One replica stepped by an asyncio task against the event loop's clock."""

    def __init__(self, scheduler: Scheduler, name: str = "", on_step: Callable | None = None):
        self.scheduler = scheduler
        self.name = name
        self.on_step = on_step
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._loop = asyncio.get_running_loop()
        self.clock = self._loop.time
        self._t = 0.0  # modeled time the next step may start at
        self.steps = 0
        self.last_batch = 0

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

    def submit(self, seq: Sequence) -> TokenStream:
        if not self.scheduler.fits_ever(seq):
            raise TooLarge
        stream = TokenStream(seq, self)
        seq.tag = stream
        seq.arrival = self.clock()
        idle = not self.scheduler.has_work
        if not self.scheduler.submit(seq):
            raise Overloaded
        if idle and self._t < seq.arrival:
            # An idle replica starts its next step when work arrives, as on the virtual clock,
            # not when this task next gets the event loop.
            self._t = seq.arrival
        self._wake.set()
        return stream

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
            result = sched.step(self._t)
            if result is None:
                # only cancelled work was left; wait for more
                self._wake.clear()
                continue
            self._t = result.end
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


class RealtimeDeployment:
    """The replicas of one deployment, each stepped by its own task."""

    def __init__(self, spec: DeploymentSpec, on_step: Callable | None = None) -> None:
        self.spec = spec
        self.replicas = [
            RealtimeReplica(spec.new_scheduler(), f"{spec.name}-{i}", on_step)
            for i in range(spec.replicas)
        ]

    def start(self) -> None:
        for r in self.replicas:
            r.start()

    async def stop(self) -> None:
        for r in self.replicas:
            await r.stop()

    def submit(self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> TokenStream:
        """Queue a request on the least-loaded replica; raises Overloaded or TooLarge."""
        seq = new_sequence(prompt_tokens, output_tokens, 0.0, cached_tokens)
        replica = min(self.replicas, key=lambda r: r.scheduler.running + len(r.scheduler.waiting))
        return replica.submit(seq)


# ---------------------------------------------------------------------------------------------
# Virtual time
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Arrival:
    time: float
    deployment: str
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    tag: object = None


class _Lookahead:
    """Arrivals read ahead from a time-sorted iterable, indexed by deployment.

    A replica's steady stretch only has to stop for the next arrival to its own deployment;
    reading a bounded number of arrivals ahead tells when that is (or a lower bound of it).
    """

    LIMIT = 256  # arrivals buffered at most

    def __init__(self, arrivals: Iterable[Arrival]) -> None:
        self._it = iter(arrivals)
        self._buf: deque[Arrival] = deque()
        self._by_dep: dict[str, deque[float]] = {}
        self._last = 0.0  # time of the last arrival read: every unread one comes later
        self._done = False

    def _read(self) -> None:
        a = next(self._it, None)
        if a is None:
            self._done = True
            return
        self._buf.append(a)
        q = self._by_dep.get(a.deployment)
        if q is None:
            q = self._by_dep[a.deployment] = deque()
        q.append(a.time)
        self._last = a.time

    def peek_time(self) -> float:
        if not self._buf and not self._done:
            self._read()
        return self._buf[0].time if self._buf else float("inf")

    def pop(self) -> Arrival:
        a = self._buf.popleft()
        self._by_dep[a.deployment].popleft()
        return a

    def next_for(self, deployment: str) -> float:
        """The time of the next arrival to ``deployment``, or a lower bound of it."""
        q = self._by_dep.get(deployment)
        while not q:
            if self._done:
                return float("inf")
            if len(self._buf) >= self.LIMIT:
                return self._last
            self._read()
            q = self._by_dep.get(deployment)
        return q[0]


class VirtualDriver:
    """Discrete-event driver: replicas step at modeled times, arrivals are events; no sleeping.

    ``on_step(replica, first_duration, user_decode_tokens, batch, steps, last_duration)`` is
    called for every step or stretch of steady decode steps (durations grow linearly within);
    ``on_finish(seq)`` for every finished sequence and ``on_reject(arrival, reason)`` for every
    refused one. ``steady=True`` lets a replica run stretches of pure decode steps in one call
    (same timeline, far fewer Python calls).

    Closed-loop workloads add arrivals while the run goes on: a callback calls ``push`` (e.g. a
    user's next request when the previous one finishes) and ``run(..., feedback=True)`` keeps
    the timeline exact by never letting a steady stretch run past the earliest moment another
    replica could finish a sequence (the earliest time a pushed arrival could appear).
    """

    def __init__(
        self,
        deployments: dict[str, DeploymentSpec],
        on_step: Callable | None = None,
        on_finish: Callable | None = None,
        on_reject: Callable | None = None,
        on_first_token: Callable | None = None,
        steady: bool = True,
    ) -> None:
        self.replicas: dict[str, list[Scheduler]] = {
            name: [spec.new_scheduler() for _ in range(spec.replicas)]
            for name, spec in deployments.items()
        }
        self.names = {
            id(s): f"{name}-{i}" for name, rs in self.replicas.items() for i, s in enumerate(rs)
        }
        self._deployment = {id(s): name for name, rs in self.replicas.items() for s in rs}
        self.on_step = on_step
        self.on_finish = on_finish
        self.on_reject = on_reject
        self.on_first_token = on_first_token
        self.steady = steady
        self.steps = 0
        self.now = 0.0
        self._pushed: list[tuple[float, int, Arrival]] = []  # arrivals added during a run
        self._push_seq = itertools.count()

    def push(self, arrival: Arrival) -> None:
        """Add an arrival during a run (from a callback); it cannot lie in the past."""
        if arrival.time < self.now:
            arrival.time = self.now
        heapq.heappush(self._pushed, (arrival.time, next(self._push_seq), arrival))

    def run(
        self, arrivals: Iterable[Arrival], until: float = float("inf"), feedback: bool = False
    ) -> float:
        """Run arrivals (sorted by time) to completion; returns the time the last step ended.

        ``feedback=True``: callbacks may ``push`` arrivals (closed loop); see the class doc.
        """
        inf = float("inf")
        ahead = _Lookahead(arrivals)
        pushed = self._pushed
        # heap of (next step start, tiebreak, scheduler) for replicas with work
        ready: list[tuple[float, int, Scheduler]] = []
        queued: set[int] = set()
        # feedback only: per replica with work, a lower bound of the time it next finishes one
        # of its sequences (the earliest a callback could push an arrival because of it)
        finish_lb: dict[int, float] = {}
        counter = itertools.count()
        end = 0.0
        while True:
            t_arr = ahead.peek_time()
            from_push = bool(pushed) and pushed[0][0] < t_arr
            if from_push:
                t_arr = pushed[0][0]
            t_step = ready[0][0] if ready else inf
            if t_arr == inf and t_step == inf:
                break
            if t_arr <= t_step:
                if t_arr > until:
                    break
                self.now = t_arr
                arr = heapq.heappop(pushed)[2] if from_push else ahead.pop()
                sched = pick_replica(self.replicas[arr.deployment])
                seq = new_sequence(
                    arr.prompt_tokens, arr.output_tokens, t_arr, arr.cached_tokens, arr.tag
                )
                if not sched.fits_ever(seq):
                    if self.on_reject:
                        self.on_reject(arr, "too_large")
                elif not sched.submit(seq):
                    if self.on_reject:
                        self.on_reject(arr, "overloaded")
                else:
                    start = max(t_arr, sched.busy_until)
                    if id(sched) not in queued:
                        queued.add(id(sched))
                        heapq.heappush(ready, (start, next(counter), sched))
                    if feedback:
                        finish_lb[id(sched)] = min(finish_lb.get(id(sched), inf), start)
                continue
            start, _, sched = heapq.heappop(ready)
            key = id(sched)
            queued.discard(key)
            self.now = start
            # A steady stretch must stop for the next arrival that could reach this replica:
            # arrivals to other deployments cannot (routing stays within a deployment).
            horizon = ahead.next_for(self._deployment[key])
            if pushed and pushed[0][0] < horizon:
                horizon = pushed[0][0]
            if feedback:
                for k, lb in finish_lb.items():
                    if lb < horizon and k != key:
                        horizon = lb
            result = self._step(sched, start, horizon)
            if result is None:
                finish_lb.pop(key, None)
                continue
            end = max(end, result.end)
            if sched.has_work:
                queued.add(key)
                heapq.heappush(ready, (result.end, next(counter), sched))
                if feedback:
                    finish_lb[key] = sched.finish_lower_bound(result.end)
            else:
                finish_lb.pop(key, None)
        return end

    def _step(self, sched: Scheduler, start: float, next_arrival: float) -> StepResult | None:
        name = self.names[id(sched)]
        on_step = self.on_step
        if self.steady and sched.steady():
            first = sched.step_index + 1
            result, dt0, dt1 = sched.run_steady(start, next_arrival)
            steps = result.index - first + 1
            self.steps += steps
            if on_step is not None:
                on_step(name, dt0, result.decode_tokens, result.batch, steps, dt1)
        else:
            result = sched.step(start)
            if result is None:
                return None
            if on_step is not None:
                dt = result.end - result.start
                on_step(name, dt, result.decode_tokens, result.batch, 1, dt)
            self.steps += 1
        if self.on_first_token is not None:
            for seq in result.first_tokens:
                self.on_first_token(seq)
        if self.on_finish is not None:
            for seq in result.finished:
                self.on_finish(seq)
        return result
