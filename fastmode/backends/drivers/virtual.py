"""The virtual clock: discrete events, no sleeping; an hour of traffic in seconds.

Time jumps to the next event: an arrival, the start of a replica's next step, or the end of a
stretch. What makes it fast without changing the timeline:

- steady stretches: while a replica's batch cannot change (pure decode, nothing admissible
  waiting), all the steps up to its next finish are one event, summed in closed form
  (``Scheduler.plan_steady``, ``backends.stretch``);
- lazy commits: a stretch is planned when it starts and committed when it ends; an arrival (or
  a cancel) that reaches the replica before then cuts it at the step under way, as stepping one
  by one would have, so arrivals cost nothing to the replicas they are not routed to. Routing
  sees each replica's load as it is at that moment (``choose``).

With a fleet (``backends.fleet``), its turns and replicas entering service are events too; a
stretch ends at them and at its replica's next tick of the other tenants (``backends.tenants``),
the moments its batch can change from outside.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastmode.backends.drivers.base import Driver, Replica, new_sequence
from fastmode.backends.engine import DeploymentSpec
from fastmode.backends.fleet import FleetSpec
from fastmode.backends.prefix_cache import PrefixKey
from fastmode.backends.scheduler import Scheduler, Sequence, StepResult

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
    prefix: PrefixKey | None = None  # where its prompt may be cut and cached
    priority: int = 0  # a shared pool admits higher priorities first


class _Lookahead:
    """Arrivals from a time-sorted iterable, read one at a time (an hour of traffic is never
    held in memory)."""

    def __init__(self, arrivals: Iterable[Arrival]) -> None:
        self._it = iter(arrivals)
        self._next: Arrival | None = None
        self._done = False

    def peek_time(self) -> float:
        if self._next is None and not self._done:
            self._next = next(self._it, None)
            self._done = self._next is None
        return self._next.time if self._next is not None else _INF

    def pop(self) -> Arrival:
        a = self._next
        assert a is not None
        self._next = None
        return a


class VirtualDriver(Driver[Replica]):
    """Discrete-event driver: replicas step at modeled times, arrivals are events; no sleeping.

    ``on_step(replica, first_duration, user_decode_tokens, batch, steps, last_duration)`` is
    called for every step or stretch of steady decode steps (durations grow linearly within);
    ``on_finish(seq)`` for every finished sequence and ``on_reject(arrival, reason)`` for every
    refused one. ``steady=True`` lets a replica run stretches of pure decode steps in one call
    (same timeline, far fewer Python calls).

    Closed-loop workloads add arrivals while the run goes on: a callback calls ``push`` (e.g. a
    user's next request when the previous one finishes); a pushed arrival cuts the stretch of
    the replica it is routed to like any other (``feedback`` is kept for compatibility).
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
        fleet: FleetSpec | None = None,
    ) -> None:
        super().__init__(deployments, fleet)
        self.on_step = on_step
        self.on_finish = on_finish
        self.on_reject = on_reject
        self.on_first_token = on_first_token
        self.steady = steady
        self.steps = 0
        self.now = 0.0
        self._pushed: list[tuple[float, int, Arrival]] = []  # arrivals added during a run
        self._push_seq = itertools.count()
        # replicas with work: heap of (time of their next event, tiebreak, replica, version);
        # an entry whose version is not the replica's current one is stale (skipped)
        self._ready: list[tuple[float, int, Replica, int]] = []
        self._queued: set[int] = set()  # replicas with a live entry
        self._version: dict[int, int] = {}
        self._counter = itertools.count()
        # per replica: its planned steady stretch (start, steps, span, first step, last step,
        # start of its last step), committed when its end comes or cut by an event before
        self._pending: dict[int, tuple[float, int, float, float, float, float]] = {}
        self._feedback = False
        self._end = 0.0
        self._ahead = _Lookahead(())
        self._until = _INF

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
                self._settle(replica, self.now)  # a stretch under way ends at this moment
                replica.scheduler.cancel(seq)  # dropped when the replica next plans a step
                if id(replica) not in self._queued:
                    self._schedule(replica, max(self.now, replica.next_start))
                return

    def choose(self, deployment: str, prefix: Any = None, prompt_tokens: int = 0) -> Replica:
        """Routing sees each replica as stepping one by one would: a stretch whose last step
        has begun has retired its finishers."""
        now = self.now
        pending = self._pending
        for r in self.by_deployment[deployment]:
            p = pending.get(id(r))
            if p is not None and now > p[5]:
                self._settle(r, now)
        return super().choose(deployment, prefix, prompt_tokens)

    def _accepted(self, replica: Replica, seq: Sequence) -> None:
        self._settle(replica, seq.arrival)  # its stretch ends with the step under way
        if id(replica) not in self._queued:
            self._schedule(replica, max(seq.arrival, replica.next_start))

    def _schedule(self, replica: Replica, t: float) -> None:
        """The replica's one event: its next step starts, or its pending stretch ends, at t."""
        key = id(replica)
        v = self._version[key] = self._version.get(key, 0) + 1
        self._queued.add(key)
        heapq.heappush(self._ready, (t, next(self._counter), replica, v))

    def run(
        self, arrivals: Iterable[Arrival], until: float = _INF, feedback: bool = False
    ) -> float:
        """Run arrivals (sorted by time) to completion; returns the time the last step ended.

        A steady stretch is planned to its first finish (or the replica's next tenant tick, or
        the fleet's next turn) and committed when its end comes; an arrival routed to the
        replica before then cuts it at the step under way (``_settle``), so arrivals to a
        deployment cost nothing to the replicas they are not routed to.

        ``feedback=True``: callbacks may ``push`` arrivals (closed loop); see the class doc.
        """
        ahead = _Lookahead(arrivals)
        pushed = self._pushed
        ready = self._ready
        queued = self._queued
        version = self._version
        pending = self._pending
        fleet = self.fleet
        self._feedback = feedback
        self._end = 0.0
        self._ahead, self._until = ahead, until
        while True:
            t_arr = ahead.peek_time()
            from_push = bool(pushed) and pushed[0][0] < t_arr
            if from_push:
                t_arr = pushed[0][0]
            t_step = ready[0][0] if ready else _INF
            if t_arr == _INF and t_step == _INF:
                break
            if fleet is not None and fleet.next_time <= t_arr and fleet.next_time <= t_step:
                if fleet.next_time > until:
                    break
                self.now = fleet.next_time
                for r in [r for r in self.replicas if id(r) in pending]:
                    self._settle(r, self.now)  # every stretch was planned to end by now
                fleet.due(self.now)  # autoscaler turn, or replicas entering service
                continue
            if t_arr <= t_step:
                if t_arr > until:
                    break
                self.now = t_arr
                arr = heapq.heappop(pushed)[2] if from_push else ahead.pop()
                self._arrive(arr)
                continue
            t, _, replica, v = heapq.heappop(ready)
            key = id(replica)
            if version.get(key) != v:
                continue  # superseded: the stretch was cut, or the replica rescheduled
            queued.discard(key)
            self.now = t
            stretch = pending.pop(key, None)
            if stretch is not None:
                self._commit(replica, stretch)
            else:
                self._begin(replica, t, until)
        return self._end

    def _begin(self, replica: Replica, start: float, until: float) -> None:
        """The replica's next step starts at ``start``: one step, or plan a steady stretch."""
        sched = replica.scheduler
        replica.next_start = start
        tenants = replica.tenants
        if tenants is not None and tenants.next_tick <= start:
            tenants.advance(start)
        if self.steady and sched.steady():
            # it stops for what may change its batch from outside: the other tenants' next
            # tick, the fleet's next turn; arrivals cut it when routed here (``_settle``)
            horizon = until
            if tenants is not None and tenants.next_tick < horizon:
                horizon = tenants.next_tick
            fleet = self.fleet
            if fleet is not None and fleet.next_time < horizon:
                horizon = fleet.next_time
            steps, span, dt0, dt1 = sched.plan_steady(start, horizon)
            self._pending[id(replica)] = (start, steps, span, dt0, dt1, start + span - dt1)
            self._schedule(replica, start + span)
            return
        result = replica.step()
        if result is None:
            if replica.retired:
                self.drained(replica, start)
            return
        dt = result.end - result.start
        self._done(replica, result, 1, dt, dt)

    def _commit(self, replica: Replica, stretch: tuple[float, int, float, float, float, float]
                ) -> None:
        start, steps, span, dt0, dt1, _ = stretch
        result = replica.scheduler.commit_steady(start, steps, span)
        replica.next_start = result.end
        self._done(replica, result, steps, dt0, dt1)

    def _quiet_until(self, t: float) -> bool:
        """Nothing but replicas' own steps happens before or at ``t`` (no arrival, no fleet
        turn): a replica whose stretch ends at ``t`` may plan its next step at once."""
        if self._ahead.peek_time() <= t:
            return False
        if self._pushed and self._pushed[0][0] <= t:
            return False
        return self.fleet is None or self.fleet.next_time > t

    def _settle(self, replica: Replica, t: float) -> None:
        """Something happens to ``replica`` at ``t`` during its pending stretch: commit the
        stretch up to the step under way at ``t`` (the whole stretch if its last step has
        begun), as stepping one by one would have."""
        stretch = self._pending.pop(id(replica), None)
        if stretch is None:
            return
        self._queued.discard(id(replica))
        self._version[id(replica)] = self._version.get(id(replica), 0) + 1  # drop its event
        start, steps, _, _, _, last_start = stretch
        if t > last_start:
            self._commit(replica, stretch)
            return
        cut = replica.scheduler.plan_steady(start, t)
        self._commit(replica, (start, cut[0], cut[1], cut[2], cut[3], start))

    def _done(
        self, replica: Replica, result: StepResult, steps: int, dt0: float, dt1: float
    ) -> None:
        """A step or a stretch ran: callbacks, counters, and the replica's next event."""
        if self.on_step is not None:
            self.on_step(replica.name, dt0, result.decode_tokens, result.batch, steps, dt1)
        self.steps += steps
        replica.steps += steps
        replica.last_batch = result.batch
        if result.end > self._end:
            self._end = result.end
        if self.on_first_token is not None:
            for seq in result.first_tokens:
                self.on_first_token(seq)
        if self.on_finish is not None:
            for seq in result.finished:
                self.on_finish(seq)
        if replica.scheduler.has_work:
            if id(replica) not in self._queued:
                t = result.end
                if t == self.now and self._quiet_until(t):
                    self._begin(replica, t, self._until)  # its next step starts now: no event
                else:
                    self._schedule(replica, t)
        elif replica.retired:
            self.drained(replica, result.end)

    def _arrive(self, arr: Arrival) -> None:
        """An arrival at ``now``: routed and admitted as ``submit`` does, refusals reported."""
        seq = new_sequence(
            arr.prompt_tokens, arr.output_tokens, self.now, arr.cached_tokens, arr.tag, arr.prefix
        )
        seq.priority = arr.priority
        replica = self.choose(arr.deployment, seq.prefix, arr.prompt_tokens)
        refused = replica.offer(seq)
        if refused is None:
            self._accepted(replica, seq)
        elif self.on_reject is not None:
            self.on_reject(arr, refused)
