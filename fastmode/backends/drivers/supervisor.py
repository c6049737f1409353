"""Replica supervision on the real-time clock: a replica never stops stepping unseen.

Each real-time replica is one asyncio task (``realtime.py``). Nothing awaits that task while
the server runs, so before this module an exception escaping a step ended it silently: the
replica's requests waited forever beside free seats and least-outstanding routing kept sending
it more. The ``Supervisor`` is told when a replica's task ends by itself (an exception, or a
cancellation that was not its ``stop``), and checks once a second that every replica holding
work still steps (a lost wake-up leaves a live task that never steps: the liveness check). On a
failure it:

1. logs it, with the traceback (or what the check saw), and reports it (``on_failure``: the
   gateway counts it in ``fastmode_replica_failures_total`` and ends the affected turns with an
   error in their protocol's own format);
2. fails over the requests that have no token yet: each is queued anew on the least-loaded
   healthy replica of its deployment (a reader waiting for its first token does not notice);
3. ends the requests that are mid-reply (their KV was on the failed engine): reported to
   ``on_failure``, then their streams are cancelled, so no reader is left waiting;
4. restarts the replica's loop on its scheduler at once. A replica that fails again within
   ``window_s`` is taken out of routing (``healthy`` False; ``/readyz`` names it) for a backoff
   that doubles from 1 s up to ``max_backoff_s``, then restarted; its unstarted requests go
   elsewhere or end clearly rather than wait for it.

It costs one timer a second per driver; nothing per request, token or step.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from fastmode.backends.drivers.base import cancel_and_wait, new_sequence, pick_replica
from fastmode.backends.drivers.live import LiveDriver, LiveReplica
from fastmode.backends.drivers.token_stream import TokenStream
from fastmode.backends.scheduler import Sequence

log = logging.getLogger("fastmode.engine")

EXCEPTION, CANCELLED, STALLED = "exception", "cancelled", "stalled"


@dataclass
class ReplicaFailure:
    """One failure of one replica, as reported to ``on_failure`` and kept for ``/readyz``."""

    replica: str
    deployment: str
    kind: str  # exception | cancelled (its task, by someone else) | stalled (liveness check)
    detail: str
    at: float  # loop time
    failures: int  # this replica's failures within the window, this one included
    failed_over: int = 0  # requests without a token yet, queued on another replica
    ended: list[TokenStream] = field(default_factory=list)  # requests ended by the failure
    restart_at: float = 0.0  # loop time the replica restarts (== ``at``: at once)


FailureCallback = Callable[[ReplicaFailure], None]


@dataclass
class _Watch:
    """What the liveness check saw of one replica at its last look."""

    steps: int = -1
    strikes: int = 0


class Supervisor:
    """Watches the replicas of one ``RealtimeDriver`` (see the module doc)."""

    def __init__(
        self, driver: LiveDriver, on_failure: FailureCallback | None = None,
        stall_after_s: float = 5.0, check_s: float = 1.0, window_s: float = 60.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.driver = driver
        self.on_failure = on_failure
        self.stall_after_s = stall_after_s  # past its step's modeled end, with work: stalled
        self.check_s = check_s
        self.window_s = window_s
        self.max_backoff_s = max_backoff_s
        self.recent: dict[str, ReplicaFailure] = {}  # replica -> its last failure
        self.unhealthy: dict[str, ReplicaFailure] = {}  # out of routing until its restart
        self._history: dict[str, list[float]] = {}
        self._watch: dict[str, _Watch] = {}
        self._task: asyncio.Task[None] | None = None
        self._restarts: dict[str, asyncio.TimerHandle] = {}

    @property
    def strikes(self) -> int:
        """Checks in a row without a step before a replica counts as stalled: a loop blocked
        for a while (every replica late at once) is one look, not a stall."""
        return max(2, math.ceil(self.stall_after_s / self.check_s))

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._checks(),
                                                                name="replica-supervisor")

    async def stop(self) -> None:
        for handle in self._restarts.values():
            handle.cancel()
        self._restarts.clear()
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _checks(self) -> None:
        while True:
            await asyncio.sleep(self.check_s)
            try:
                self.check()
            except Exception:  # the watcher must outlive a bug of its own
                log.exception("replica liveness check failed")

    # -- detection ------------------------------------------------------------------------

    @property
    def tearing_down(self) -> bool:
        """The event loop is cancelling every task (``asyncio.run`` ending without ``stop``):
        the supervisor's own task is being cancelled too. A replica cancelled then is not a
        failure to restart."""
        task = self._task
        return task is None or task.done() or task.cancelling() > 0

    def exited(self, replica: LiveReplica, error: BaseException) -> None:
        """A replica's loop task ended by itself (its ``on_exit``)."""
        if isinstance(error, asyncio.CancelledError):
            if self.tearing_down:
                log.warning("replica %s cancelled while the event loop shuts down",
                            replica.name)
                return
            self.failed(replica, CANCELLED, str(error), error)
        else:
            self.failed(replica, EXCEPTION, f"{type(error).__name__}: {error}", error)

    def check(self, now: float | None = None) -> list[LiveReplica]:
        """The liveness check: a replica whose loop is alive and holds work (running or
        waiting sequences) but has not stepped for ``strikes`` checks in a row, while its
        step in flight should have ended over ``stall_after_s`` ago, is stalled: its loop is
        cancelled and it fails as any other. Returns the replicas found stalled."""
        now = self.driver.now if now is None else now
        stalled = []
        for replica in self.driver.replicas:
            watch = self._watch.setdefault(replica.name, _Watch())
            if (not replica.alive or not replica.scheduler.has_work
                    or replica.steps != watch.steps):
                watch.steps, watch.strikes = replica.steps, 0
                continue
            watch.strikes += 1
            # past the modeled end of its step in flight, in wall seconds (the host's stall)
            overdue = (now - replica.next_start) * replica.scale
            if watch.strikes >= self.strikes and overdue > self.stall_after_s:
                stalled.append(replica)
        for replica in stalled:
            sched = replica.scheduler
            replica.halt()
            self.failed(replica, STALLED,
                         f"no step for {now - replica.next_start:.1f} s past its modeled end "
                         f"with {sched.running} running and {len(sched.waiting)} waiting "
                         f"(step {replica.steps})")
        return stalled

    # -- recovery -------------------------------------------------------------------------

    def failed(self, replica: LiveReplica, kind: str, detail: str,
               error: BaseException | None = None) -> ReplicaFailure:
        """Log, report, fail over or end the replica's requests, and restart it (module doc)."""
        now = self.driver.now
        history = [t for t in self._history.get(replica.name, []) if now - t < self.window_s]
        history.append(now)
        self._history[replica.name] = history
        backoff = 0.0 if len(history) == 1 else min(self.max_backoff_s,
                                                    2.0 ** (len(history) - 2))
        log.error("replica %s failed (%s): %s; %s", replica.name, kind, detail,
                  f"out of routing, restarting in {backoff:g} s" if backoff
                  else "restarting now", exc_info=error)
        if backoff:
            replica.healthy = False
        failure = ReplicaFailure(replica.name, replica.deployment, kind, detail, now,
                                 len(history), restart_at=now + backoff)
        self._evacuate(replica, failure, keep_waiting=not backoff)
        self.recent[replica.name] = failure
        if self.on_failure is not None:
            try:
                self.on_failure(failure)
            except Exception:
                log.exception("replica %s: reporting its failure failed", replica.name)
        for stream in failure.ended:
            stream.cancel()  # (a no-op for those the report ended already)
        replica.release_readers()  # whoever still waits looks again
        if backoff:
            self.unhealthy[replica.name] = failure
            old = self._restarts.pop(replica.name, None)
            if old is not None:
                old.cancel()
            self._restarts[replica.name] = asyncio.get_running_loop().call_later(
                backoff, self._restart, replica)
        elif not replica.stopped:
            replica.start()
        return failure

    def _restart(self, replica: LiveReplica) -> None:
        self._restarts.pop(replica.name, None)
        self.unhealthy.pop(replica.name, None)
        replica.healthy = True
        if not replica.stopped:
            log.warning("replica %s restarted after its backoff", replica.name)
            replica.start()

    def _evacuate(self, replica: LiveReplica, failure: ReplicaFailure,
                  keep_waiting: bool) -> None:
        """Requests without a token yet go to another healthy replica (or stay, to be served
        after an immediate restart, when none takes them); the others end."""
        sched = replica.scheduler
        for seq in (*sched.waiting, *sched.prefilling):
            stream = seq.tag
            if not isinstance(stream, TokenStream) or stream.over:
                continue
            if seq.first_step >= 0:  # preempted after some tokens: no copy can resume it
                failure.ended.append(stream)
                continue
            moved = self._fail_over(replica, seq, stream)
            if moved:
                failure.failed_over += 1
            elif not keep_waiting:
                failure.ended.append(stream)
        for seq in sched.decoding.values():
            if isinstance(seq.tag, TokenStream) and not seq.tag.over:
                failure.ended.append(seq.tag)

    def _fail_over(self, replica: LiveReplica, seq: Sequence, stream: TokenStream) -> bool:
        """Queue a copy of ``seq`` on the least-loaded healthy other replica of its pool and
        point its stream there; False if there is none or it refuses."""
        driver = self.driver
        pool = [r for r in driver.by_deployment.get(replica.deployment, ())
                if r is not replica and r.healthy and r.alive]
        if not pool:
            return False
        now = driver.now
        target = pick_replica(pool, seq.prefix, seq.prompt_tokens, now,
                              driver.routing.get(replica.deployment))
        # it arrives there now; what the failed replica's prefix cache held is not there
        copy = new_sequence(seq.prompt_tokens, seq.output_tokens, now,
                            seq.cached_tokens - seq.cache_hit, stream, seq.prefix)
        copy.priority = seq.priority
        if target.offer(copy) is not None:
            return False
        copy.arrival = seq.arrival  # its queue time counts from when the client sent it
        replica.scheduler.cancel(seq)
        stream.move(copy, target)
        target.wake()
        return True
