"""The virtual clock: discrete events, no sleeping; an hour of traffic in seconds.

Time jumps to the next event: an arrival, or the start of a replica's next step. Two things
make it fast without changing the timeline:

- steady stretches: while a replica's batch cannot change (pure decode, nothing admissible
  waiting), it runs all the steps up to its next finish in one call (``Scheduler.run_steady``);
- a bounded look-ahead over the arrivals (``_Lookahead``), so a stretch stops only for the next
  arrival that can reach *its* deployment (routing never leaves a deployment).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine import DeploymentSpec
from ..scheduler import Scheduler, Sequence, StepResult
from .base import Driver, Replica, new_sequence, pick_replica

# on_step(replica name, first step's duration, user decode tokens, batch, steps, last duration)
StepCallback = Callable[[str, float, int, int, int, float], None]
SequenceCallback = Callable[[Sequence], None]
RejectCallback = Callable[["Arrival", str], None]

_INF = float("inf")


@dataclass(slots=True)
class Arrival:
    """A request arriving at ``time`` (seconds of virtual time) to ``deployment``."""

    time: float
    deployment: str
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    tag: Any = None  # the caller's; becomes the sequence's tag


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
        return self._buf[0].time if self._buf else _INF

    def pop(self) -> Arrival:
        a = self._buf.popleft()
        self._by_dep[a.deployment].popleft()
        return a

    def next_for(self, deployment: str) -> float:
        """The time of the next arrival to ``deployment``, or a lower bound of it."""
        q = self._by_dep.get(deployment)
        while not q:
            if self._done:
                return _INF
            if len(self._buf) >= self.LIMIT:
                return self._last
            self._read()
            q = self._by_dep.get(deployment)
        return q[0]


class VirtualDriver(Driver[Replica]):
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
    ``submit`` (from a callback, or before ``run``) admits a request at ``now`` directly.
    """

    now: float = 0.0  # virtual time: the event being handled (a plain attribute, set per event)

    def __init__(
        self,
        deployments: Mapping[str, DeploymentSpec],
        on_step: StepCallback | None = None,
        on_finish: SequenceCallback | None = None,
        on_reject: RejectCallback | None = None,
        on_first_token: SequenceCallback | None = None,
        steady: bool = True,
    ) -> None:
        super().__init__(deployments)
        self.on_step = on_step
        self.on_finish = on_finish
        self.on_reject = on_reject
        self.on_first_token = on_first_token
        self.steady = steady
        self.steps = 0
        self.now = 0.0
        self._pushed: list[tuple[float, int, Arrival]] = []  # arrivals added during a run
        self._push_seq = itertools.count()
        # replicas with work: heap of (next step start, tiebreak, replica), and their ids
        self._ready: list[tuple[float, int, Replica]] = []
        self._queued: set[int] = set()
        self._counter = itertools.count()
        # feedback only: per replica with work, a lower bound of the time it next finishes one
        # of its sequences (the earliest a callback could push an arrival because of it)
        self._finish_lb: dict[int, float] = {}
        self._feedback = False

    def _new_replica(self, scheduler: Scheduler, name: str, deployment: str) -> Replica:
        return Replica(scheduler, name, deployment)

    def push(self, arrival: Arrival) -> None:
        """Add an arrival during a run (from a callback); it cannot lie in the past."""
        if arrival.time < self.now:
            arrival.time = self.now
        heapq.heappush(self._pushed, (arrival.time, next(self._push_seq), arrival))

    def cancel(self, seq: Sequence) -> None:
        for replica in self.replicas:
            if replica.holds(seq):
                replica.scheduler.cancel(seq)  # dropped when the replica next plans a step
                return

    def _accepted(self, replica: Replica, seq: Sequence) -> None:
        start = max(seq.arrival, replica.next_start)
        key = id(replica)
        if key not in self._queued:
            self._queued.add(key)
            heapq.heappush(self._ready, (start, next(self._counter), replica))
        if self._feedback:
            lbs = self._finish_lb
            lbs[key] = min(lbs.get(key, _INF), start)

    def run(
        self, arrivals: Iterable[Arrival], until: float = _INF, feedback: bool = False
    ) -> float:
        """Run arrivals (sorted by time) to completion; returns the time the last step ended.

        ``feedback=True``: callbacks may ``push`` arrivals (closed loop); see the class doc.
        """
        ahead = _Lookahead(arrivals)
        pushed = self._pushed
        ready = self._ready
        queued = self._queued
        finish_lb = self._finish_lb
        counter = self._counter
        self._feedback = feedback
        end = 0.0
        while True:
            t_arr = ahead.peek_time()
            from_push = bool(pushed) and pushed[0][0] < t_arr
            if from_push:
                t_arr = pushed[0][0]
            t_step = ready[0][0] if ready else _INF
            if t_arr == _INF and t_step == _INF:
                break
            if t_arr <= t_step:
                if t_arr > until:
                    break
                self.now = t_arr
                arr = heapq.heappop(pushed)[2] if from_push else ahead.pop()
                self._arrive(arr)
                continue
            start, _, replica = heapq.heappop(ready)
            key = id(replica)
            queued.discard(key)
            self.now = start
            # A steady stretch must stop for the next arrival that could reach this replica:
            # arrivals to other deployments cannot (routing stays within a deployment).
            horizon = ahead.next_for(replica.deployment)
            if pushed and pushed[0][0] < horizon:
                horizon = pushed[0][0]
            if feedback:
                for k, lb in finish_lb.items():
                    if lb < horizon and k != key:
                        horizon = lb
            result = self._step(replica, start, horizon)
            if result is None:
                finish_lb.pop(key, None)
                continue
            end = max(end, result.end)
            sched = replica.scheduler
            if sched.has_work:
                queued.add(key)
                heapq.heappush(ready, (result.end, next(counter), replica))
                if feedback:
                    finish_lb[key] = sched.finish_lower_bound(result.end)
            else:
                finish_lb.pop(key, None)
        return end

    def _arrive(self, arr: Arrival) -> None:
        """An arrival at ``now``: routed and admitted as ``submit`` does, refusals reported."""
        replica = pick_replica(self.by_deployment[arr.deployment])
        seq = new_sequence(
            arr.prompt_tokens, arr.output_tokens, self.now, arr.cached_tokens, arr.tag
        )
        refused = replica.offer(seq)
        if refused is None:
            self._accepted(replica, seq)
        elif self.on_reject is not None:
            self.on_reject(arr, refused)

    def _step(self, replica: Replica, start: float, next_arrival: float) -> StepResult | None:
        sched = replica.scheduler
        on_step = self.on_step
        replica.next_start = start
        if self.steady and sched.steady():
            first = sched.step_index + 1
            result, dt0, dt1 = sched.run_steady(start, next_arrival)
            replica.next_start = result.end
            steps = result.index - first + 1
            if on_step is not None:
                on_step(replica.name, dt0, result.decode_tokens, result.batch, steps, dt1)
        else:
            stepped = replica.step()
            if stepped is None:
                return None
            result = stepped
            steps = 1
            if on_step is not None:
                dt = result.end - result.start
                on_step(replica.name, dt, result.decode_tokens, result.batch, 1, dt)
        self.steps += steps
        replica.steps += steps
        replica.last_batch = result.batch
        if self.on_first_token is not None:
            for seq in result.first_tokens:
                self.on_first_token(seq)
        if self.on_finish is not None:
            for seq in result.finished:
                self.on_finish(seq)
        return result
