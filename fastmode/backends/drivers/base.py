"""What both clocks share: the driver API, replicas, routing, admission and sequence ids.

A driver owns the replicas of some deployments, each a ``Scheduler`` (the clock-free state
machine of ``backends.scheduler``), and decides when their steps happen. There are two, on one
API, the way simpy keeps ``Environment`` and its real-time subclass ``RealtimeEnvironment``:

- ``VirtualDriver`` (``virtual.py``) jumps from event to event: an hour of traffic in seconds;
- ``RealtimeDriver`` (``realtime.py``) sleeps until each step's modeled end: what a client of
  the gateway feels.

Everything that decides *what* happens lives here or in the scheduler, never in one driver
only, so for the same arrivals both produce the same timeline: a request goes to the replica
with the least outstanding work (or, with prefix-aware routing, to the one that holds the
longest prefix of its prompt, within a bound on imbalance); it is refused if its KV could
never fit (``TooLarge``) or the waiting queue is full (``Overloaded``); and a replica steps at
the time its previous step ended, or, when idle, at the moment work arrives. Only the way time passes differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

from fastmode.backends.engine import DeploymentSpec
from fastmode.backends.fleet import Fleet, FleetSpec
from fastmode.backends.prefix_cache import CacheRouting, PrefixKey
from fastmode.backends.scheduler import Scheduler, Sequence, StepResult
from fastmode.backends.tenants import TenantLoad

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
    prefix: PrefixKey | None = None,
) -> Sequence:
    """A fresh sequence; ``cached_tokens`` is clipped so at least one prompt token is prefilled."""
    if prompt_tokens <= 0 or output_tokens <= 0:
        raise ValueError("prompt_tokens and output_tokens must be positive")
    if not 0 <= cached_tokens < prompt_tokens:
        cached_tokens = max(0, min(cached_tokens, prompt_tokens - 1))
    if prefix is not None and prefix.empty:
        prefix = None
    return Sequence(next(_ids), prompt_tokens, output_tokens, arrival, cached_tokens, tag, prefix)


class Replica:
    """One replica: its scheduler and the modeled time its next step may start.

    ``next_start`` is the clock both drivers keep per replica: the end of the previous step, or
    the arrival time of the work that woke an idle replica. A driver subclasses this to add what
    its clock needs (a task and a wake-up event in real time).
    """

    __slots__ = ("scheduler", "name", "deployment", "next_start", "steps", "last_batch",
                 "tenants", "retired", "offered", "healthy")

    def __init__(self, scheduler: Scheduler, name: str, deployment: str) -> None:
        self.scheduler = scheduler
        self.name = name  # "<deployment>-<index>"
        self.deployment = deployment
        self.next_start = 0.0
        self.steps = 0
        self.last_batch = 0
        self.tenants: TenantLoad | None = None  # the other tenants' share here (a fleet's)
        self.retired = False  # moved out of its pool: finishes its requests, takes no more
        self.offered = 0  # output tokens of every request offered here (the fleet's demand)
        # False while a failed replica waits to restart (``drivers.supervisor``): out of routing
        self.healthy = True

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
        if not self.healthy:  # a failed replica waiting to restart (only when all of them are)
            return OVERLOADED
        self.offered += seq.output_tokens
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
        t = self.tenants
        if t is not None and t.next_tick <= self.next_start:
            t.advance(self.next_start)  # the other tenants' ticks due by this step's start
        result = self.scheduler.step(self.next_start)
        if result is not None:
            self.next_start = result.end
        return result

    def holds(self, seq: Sequence) -> bool:
        """Is ``seq`` waiting or running here? (For cancelling by sequence.)"""
        s = self.scheduler
        return seq.id in s.decoding or seq in s.prefilling or seq in s.waiting


R = TypeVar("R", bound=Replica)


def pick_replica(
    replicas: Iterable[R],
    prefix: PrefixKey | None = None,
    prompt_tokens: int = 0,
    now: float = 0.0,
    routing: CacheRouting | None = None,
) -> R:
    """Least outstanding work: fewest running plus waiting sequences, first on ties; a replica
    that is not ``healthy`` (failed, waiting to restart) only when none is.

    With a ``prefix`` and ``routing.prefer_cached``: the replica holding the longest cached
    prefix of the prompt, among those at most ``routing.max_imbalance`` sequences busier than
    the least loaded; with no hit anywhere, the key's ``affinity`` (OpenAI's
    ``prompt_cache_key``) picks a replica within the same bound, so that requests sharing a
    prefix meet where it will be cached."""
    rs = [r for r in replicas if r.healthy] or list(replicas)
    least = min(rs, key=lambda r: r.load)
    if prefix is None or routing is None or not routing.prefer_cached or len(rs) == 1:
        return least
    bound = least.load + routing.max_imbalance
    best, best_hit = least, 0
    for r in rs:
        if r.load <= bound:
            hit = r.scheduler.cached_prefix(prefix, prompt_tokens, now)
            if hit > best_hit or (hit == best_hit and hit and r.load < best.load):
                best, best_hit = r, hit
    if best_hit == 0 and prefix.affinity is not None:
        home = rs[prefix.affinity % len(rs)]
        if home.load <= bound:
            return home
    return best


class Driver(ABC, Generic[R]):
    """The clock API: ``now``, ``submit``, ``cancel``; each driver adds how it runs.

    Running differs on purpose: the virtual driver's ``run(arrivals)`` owns the thread until
    the arrivals are served, while the real-time driver shares the event loop with the HTTP
    server, so it is ``start``-ed and ``stop``-ped and its replicas step in the background.
    """

    def __init__(
        self, deployments: Mapping[str, DeploymentSpec], fleet: FleetSpec | None = None
    ) -> None:
        """``fleet``: the replicas' pools move and the other tenants are demand (their load
        moves per tick); without one, each deployment keeps its replicas and its mean load."""
        self.routing = {name: spec.routing for name, spec in deployments.items()}
        self.specs = dict(deployments)
        self.by_deployment: dict[str, list[R]] = {name: [] for name in deployments}
        self.draining: list[R] = []  # retired by the fleet, finishing their requests
        self.all_replicas: dict[str, R] = {}  # every replica ever, by name (for statistics)
        self._names = {name: itertools.count() for name in deployments}
        self._tenant_seed = fleet.seed if fleet is not None else 0
        self._dynamic = fleet is not None
        for name, spec in deployments.items():
            pool = fleet.pools.get(name) if fleet is not None else None
            n = pool.replicas if pool is not None else spec.replicas
            for _ in range(n):
                self.add_replica(name, self.now, True, n)
        self.fleet = Fleet(fleet, self, self.now) if fleet is not None else None

    # -- pools (backends.fleet calls these) ----------------------------------------------

    def add_replica(
        self, deployment: str, now: float, warm: bool, replicas: int | None = None
    ) -> R:
        """A new replica of ``deployment``, taking requests from ``now``; its share of the
        other tenants starts at their mean load on ``replicas`` replicas (``warm``) or empty (a
        replica just moved in)."""
        spec = self.specs[deployment]
        name = f"{deployment}-{next(self._names[deployment])}"
        replica = self._new_replica(spec.new_scheduler(), name, deployment)
        replica.next_start = now
        pool = self.by_deployment[deployment]
        pool.append(replica)
        self.all_replicas[name] = replica
        if self._dynamic and spec.tenants is not None:
            rng = random.Random(f"{self._tenant_seed}:{name}")
            replica.tenants = TenantLoad(
                spec.tenants, replica.scheduler, rng, now, replicas or len(pool), warm
            )
            self._reshare(deployment)
        return replica

    def retire_replica(self, replica: R, now: float) -> None:
        """Take ``replica`` out of its pool: no new requests; its tenants move to the others;
        it steps until its own requests are done (``drained``)."""
        pool = self.by_deployment[replica.deployment]
        pool.remove(replica)
        replica.retired = True
        self.draining.append(replica)
        if replica.tenants is not None:
            replica.tenants.advance(now)
            replica.tenants.hand_over([r.tenants for r in pool if r.tenants is not None])
            replica.tenants.share(0)
            self._reshare(replica.deployment)
        if not replica.scheduler.has_work:
            self.drained(replica, now)

    def _reshare(self, deployment: str) -> None:
        pool = self.by_deployment[deployment]
        for r in pool:
            if r.tenants is not None:
                r.tenants.share(len(pool))

    def drained(self, replica: R, now: float) -> None:
        """A retired replica finished its last request (its driver, or whatever runs the
        driver's fleet, calls this)."""
        if replica in self.draining:
            self.draining.remove(replica)
            if self.fleet is not None:
                self.fleet.drained(replica, now)

    @abstractmethod
    def _new_replica(self, scheduler: Scheduler, name: str, deployment: str) -> R:
        """This driver's kind of replica."""

    @property
    def replicas(self) -> list[R]:
        """Every replica in service, deployment by deployment, then those draining."""
        return [r for rs in self.by_deployment.values() for r in rs] + self.draining

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
        prefix: PrefixKey | None = None,
        priority: int = 0,
        replica: R | None = None,
        lora: Any = None,
    ) -> Sequence:
        """Queue a request arriving ``now`` on the replica ``choose`` picks (``priority``: a
        shared pool admits higher priorities first); ``replica``: the one ``choose`` gave
        the caller a moment ago, in the same event-loop turn (not chosen twice); ``lora``:
        the LoRA adapter it runs on (``backends.lora``).

        Raises ``TooLarge`` or ``Overloaded``; the sequence then never entered the engine.
        """
        seq = new_sequence(prompt_tokens, output_tokens, self.now, cached_tokens, tag, prefix)
        seq.priority = priority
        seq.lora = lora
        if replica is None:
            replica = self.choose(deployment, seq.prefix, prompt_tokens)
        refused = replica.offer(seq)
        if refused is not None:
            raise _REFUSALS[refused]
        self._accepted(replica, seq)
        return seq

    def choose(self, deployment: str, prefix: PrefixKey | None = None,
               prompt_tokens: int = 0) -> R:
        """The replica of ``deployment`` a request arriving now goes to (``pick_replica`` with
        the deployment's routing)."""
        return pick_replica(self.by_deployment[deployment], prefix, prompt_tokens, self.now,
                            self.routing[deployment])

    @abstractmethod
    def _accepted(self, replica: R, seq: Sequence) -> None:
        """``seq`` was queued on ``replica``: make sure the replica will step."""

    @abstractmethod
    def cancel(self, seq: Sequence) -> None:
        """Cancel a request; its slot and KV are free when its replica plans its next step."""


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (a replica's, the supervisor's, the fleet's) and wait until it ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
