"""What both clocks share: the driver API, replicas, routing, admission and sequence ids.

A driver owns the replicas of some deployments, each a ``Scheduler`` (the clock-free state
machine of ``backends.scheduler``), and decides when their steps happen. There are two, on one
API, the way simpy keeps ``Environment`` and its real-time subclass ``RealtimeEnvironment``:

- ``VirtualDriver`` (``virtual.py``) jumps from event to event: an hour of traffic in seconds;
- ``RealtimeDriver`` (``realtime.py``) sleeps until each step's modeled end: what a client of
  the gateway feels.

Everything that decides *what* happens lives here or in the scheduler, never in one driver
only, so for the same arrivals both produce the same timeline: a request goes to the replica
with the least outstanding work; it is refused if its KV could never fit (``TooLarge``) or the
waiting queue is full (``Overloaded``); and a replica steps at the time its previous step ended,
or, when idle, at the moment work arrives. Only the way time passes differs.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

from ..engine import DeploymentSpec
from ..scheduler import Scheduler, Sequence, StepResult

TOO_LARGE = "too_large"
OVERLOADED = "overloaded"


class Overloaded(Exception):
    """Every replica's waiting queue is full."""


class TooLarge(Exception):
    """The request's KV would not fit a replica even when idle."""


_REFUSALS: dict[str, type[Exception]] = {TOO_LARGE: TooLarge, OVERLOADED: Overloaded}

# One id sequence for the whole process: ids only break ties (the scheduler's finish heap), so
# they must grow with submission order, whichever driver submitted.
_ids = itertools.count(1)


def new_sequence(
    prompt_tokens: int,
    output_tokens: int,
    arrival: float,
    cached_tokens: int = 0,
    tag: Any = None,
) -> Sequence:
    """A fresh sequence; ``cached_tokens`` is clipped so at least one prompt token is prefilled."""
    if prompt_tokens <= 0 or output_tokens <= 0:
        raise ValueError("prompt_tokens and output_tokens must be positive")
    if not 0 <= cached_tokens < prompt_tokens:
        cached_tokens = max(0, min(cached_tokens, prompt_tokens - 1))
    return Sequence(next(_ids), prompt_tokens, output_tokens, arrival, cached_tokens, tag)


class Replica:
    """One replica: its scheduler and the modeled time its next step may start.

    ``next_start`` is the clock both drivers keep per replica: the end of the previous step, or
    the arrival time of the work that woke an idle replica. A driver subclasses this to add what
    its clock needs (a task and a wake-up event in real time).
    """

    __slots__ = ("scheduler", "name", "deployment", "next_start", "steps", "last_batch")

    def __init__(self, scheduler: Scheduler, name: str, deployment: str) -> None:
        self.scheduler = scheduler
        self.name = name  # "<deployment>-<index>"
        self.deployment = deployment
        self.next_start = 0.0
        self.steps = 0
        self.last_batch = 0

    @property
    def load(self) -> int:
        """Outstanding work: running plus waiting sequences (what routing compares)."""
        s = self.scheduler
        return s.running + len(s.waiting)

    def offer(self, seq: Sequence) -> str | None:
        """Queue ``seq`` (arriving at ``seq.arrival``); the reason it is refused, or None.

        An idle replica's next step starts when the work arrives, not at the end of a step long
        past (nor, in real time, whenever its task next gets the event loop).
        """
        sched = self.scheduler
        if not sched.fits_ever(seq):
            return TOO_LARGE
        idle = not sched.has_work
        if not sched.submit(seq):
            return OVERLOADED
        if idle and self.next_start < seq.arrival:
            self.next_start = seq.arrival
        return None

    def step(self) -> StepResult | None:
        """Plan and run the scheduler's next step from ``next_start``; None if nothing to do."""
        result = self.scheduler.step(self.next_start)
        if result is not None:
            self.next_start = result.end
        return result

    def holds(self, seq: Sequence) -> bool:
        """Is ``seq`` waiting or running here? (For cancelling by sequence.)"""
        s = self.scheduler
        return seq.id in s.decoding or seq in s.prefilling or seq in s.waiting


R = TypeVar("R", bound=Replica)


def pick_replica(replicas: Iterable[R]) -> R:
    """Least outstanding work: fewest running plus waiting sequences, first on ties."""
    return min(replicas, key=lambda r: r.load)


class Driver(ABC, Generic[R]):
    """The clock API: ``now``, ``submit``, ``cancel``; each driver adds how it runs.

    Running differs on purpose: the virtual driver's ``run(arrivals)`` owns the thread until
    the arrivals are served, while the real-time driver shares the event loop with the HTTP
    server, so it is ``start``-ed and ``stop``-ped and its replicas step in the background.
    """

    def __init__(self, deployments: Mapping[str, DeploymentSpec]) -> None:
        self.by_deployment: dict[str, list[R]] = {
            name: [
                self._new_replica(spec.new_scheduler(), f"{name}-{i}", name)
                for i in range(spec.replicas)
            ]
            for name, spec in deployments.items()
        }

    @abstractmethod
    def _new_replica(self, scheduler: Scheduler, name: str, deployment: str) -> R:
        """This driver's kind of replica."""

    @property
    def replicas(self) -> list[R]:
        """Every replica, deployment by deployment."""
        return [r for rs in self.by_deployment.values() for r in rs]

    @property
    @abstractmethod
    def now(self) -> float:
        """The driver's clock, in seconds: virtual time, or the event loop's monotonic time."""

    def submit(
        self,
        deployment: str,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        tag: Any = None,
    ) -> Sequence:
        """Queue a request arriving ``now`` on the least-loaded replica of ``deployment``.

        Raises ``TooLarge`` or ``Overloaded``; the sequence then never entered the engine.
        """
        seq = new_sequence(prompt_tokens, output_tokens, self.now, cached_tokens, tag)
        replica = pick_replica(self.by_deployment[deployment])
        refused = replica.offer(seq)
        if refused is not None:
            raise _REFUSALS[refused]
        self._accepted(replica, seq)
        return seq

    @abstractmethod
    def _accepted(self, replica: R, seq: Sequence) -> None:
        """``seq`` was queued on ``replica``: make sure the replica will step."""

    @abstractmethod
    def cancel(self, seq: Sequence) -> None:
        """Cancel a request; its slot and KV are free when its replica plans its next step."""
