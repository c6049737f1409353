"""The gateway's engine on the real-time clock: every deployment on one driver, and its fleet.

A fleet moves replicas between deployments (``backends.fleet``), so they share one
``RealtimeDriver``; the fleet's turns run in one asyncio task that sleeps until the next turn or
the next replica to enter service (one timer per turn, nothing per request or token). The
gateway keeps one ``PoolHandle`` per deployment, with what it needs of it: the replicas in
service, ``choose`` and ``submit``.

A replica the fleet retires stops taking requests at once; its task ends once its requests are
done (checked at each turn), and the fleet stops paying for it if its group is elastic.

The driver's ``Supervisor`` watches every replica, those the fleet adds included; the fleet's
own task is watched the same way: if a turn raises, it is logged and the task restarted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from fastmode.backends.drivers.base import cancel_and_wait
from fastmode.backends.drivers.realtime import RealtimeDriver, RealtimeReplica, StepCallback
from fastmode.backends.drivers.token_stream import TokenStream
from fastmode.backends.engine import DeploymentSpec, EngineSpec
from fastmode.backends.fleet import FleetSpec
from fastmode.backends.prefix_cache import PrefixKey

log = logging.getLogger("fastmode.engine")


class _FleetDriver(RealtimeDriver):
    """A real-time driver whose replicas may come and go while it runs."""

    def __init__(
        self, deployments: Mapping[str, DeploymentSpec], on_step: StepCallback | None,
        fleet: FleetSpec | None, time_scale: float = 1.0,
    ) -> None:
        self.started = False
        super().__init__(deployments, on_step, fleet, time_scale=time_scale)

    def add_replica(
        self, deployment: str, now: float, warm: bool, replicas: int | None = None
    ) -> RealtimeReplica:
        replica = super().add_replica(deployment, now, warm, replicas)
        if self.started:
            replica.start()
        return replica

    def start(self) -> None:
        self.started = True
        super().start()


class PoolHandle:
    """One deployment of the fleet, as the gateway sees it."""

    def __init__(self, driver: _FleetDriver, spec: DeploymentSpec) -> None:
        self.driver = driver
        self.spec = spec

    @property
    def replicas(self) -> list[RealtimeReplica]:
        """The replicas in service now (the fleet may move them)."""
        return self.driver.by_deployment[self.spec.name]

    def choose(self, prefix: PrefixKey | None = None, prompt_tokens: int = 0) -> RealtimeReplica:
        """The replica ``submit`` would pick now (admission models its queue beforehand)."""
        return self.driver.choose(self.spec.name, prefix, prompt_tokens)

    def submit(
        self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0,
        prefix: PrefixKey | None = None, priority: int = 0,
        replica: RealtimeReplica | None = None, lora: Any = None,
    ) -> TokenStream:
        """Queue a request; raises Overloaded or TooLarge. ``priority``: the tier's;
        ``replica``: what ``choose`` returned just before (no await in between); ``lora``:
        the adapter it runs on (``backends.lora``)."""
        seq = self.driver.submit(
            self.spec.name, prompt_tokens, output_tokens, cached_tokens, prefix=prefix,
            priority=priority, replica=replica, lora=lora,
        )
        stream: TokenStream = seq.tag
        return stream


class RealtimeFleet:
    """Every deployment of an engine on one real-time driver, with the engine's fleet."""

    def __init__(self, spec: EngineSpec, on_step: StepCallback | None = None,
                 time_scale: float = 1.0) -> None:
        self.spec = spec
        self.driver = _FleetDriver(spec.deployments, on_step, spec.fleet, time_scale)
        self.deployments = {
            name: PoolHandle(self.driver, dep) for name, dep in spec.deployments.items()
        }
        self._task: asyncio.Task[None] | None = None

    @property
    def fleet(self) -> Any:
        return self.driver.fleet

    def start(self) -> None:
        self.driver.start()
        fleet = self.driver.fleet
        if fleet is not None and fleet.spec.autoscaled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._turns(), name="fleet-autoscaler"
            )
            self._task.add_done_callback(self._turns_ended)

    def _turns_ended(self, task: asyncio.Task[None]) -> None:
        """The fleet's task ended by itself (``stop`` lets go of it first): a turn raised, so
        log it and start again; cancelled by someone else (the event loop shutting down
        without ``stop``): say so."""
        if task is not self._task:
            return
        self._task = None
        if task.cancelled():
            log.warning("the fleet's turns were cancelled")
            return
        log.error("the fleet's turns stopped; restarting them", exc_info=task.exception())
        self.start()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self.driver.stop()

    async def _turns(self) -> None:
        driver = self.driver
        fleet = driver.fleet
        assert fleet is not None
        clock = driver.clock
        while True:
            await asyncio.sleep(clock.wall(max(0.0, fleet.next_time - clock.now())))
            now = clock.now()
            self.refresh(now)
            fleet.due(now)
            for replica in list(driver.draining):
                if not replica.scheduler.has_work:
                    driver.drained(replica, now)
                    await replica.stop()

    def refresh(self, now: float) -> None:
        """Bring the other tenants of idle replicas up to ``now`` (their ticks run lazily, at
        the next step; a replica with work is at most one step behind)."""
        for replica in self.driver.replicas:
            t = replica.tenants
            if t is not None and not replica.scheduler.has_work and t.next_tick <= now:
                t.advance(now)
