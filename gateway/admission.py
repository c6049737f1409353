"""The gateway's protocol-neutral core: a ``TurnRequest`` in, an admitted ``Job`` out.

``Gateway`` owns the in-process deployments (one real-time driver per deployment), routes a
request to its tier, checks auth and limits, asks the mock model for the whole reply, and
queues it in the engine, applying the overflow policy when the tier is full or its modeled
queue wait is over the bound (``gateway.overflow``). It also holds what every turn shares: the
state backend (ledger, buckets, responses, settings), the fault injector and the set of turns
in flight (for the stalled-reader watchdog and graceful shutdown). No physics and no wire
format live here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator, Mapping
from typing import Any

from backends.drivers import (
    Overloaded,
    PoolHandle,
    RealtimeFleet,
    RealtimeReplica,
    TokenStream,
    TooLarge,
)
from backends.engine import EngineSpec, Tier, build
from backends.mockmodel import Generation, generate
from backends.prefix_cache import PrefixKey
from backends.scheduler import Scheduler, StepResult

from . import overflow
from .auth import Authenticator
from .caching import cache_writes
from .config import Config
from .errors import APIError
from .faults import FaultInjector
from .ids import new_id
from .job import Job
from .ledger import job_row
from .metrics import Metrics, add_gauge
from .netem import network_time
from .request import TurnRequest
from .routing import Router, flex_busy
from .settlement import settle
from .state import StateBackend, UsageRow, open_state


class _Refused(Exception):
    """The engine will not take the request now; ``retry_s`` is when it modeled it would."""

    def __init__(self, retry_s: float, wait_s: float | None) -> None:
        super().__init__("refused")
        self.retry_s = retry_s
        self.wait_s = wait_s  # the modeled queue wait, when that was the reason


class Gateway:
    def __init__(self, config: Config, state: StateBackend | None = None) -> None:
        self.config = config
        self.spec: EngineSpec = build(config.sim())
        self.router = Router(config, self.spec)
        self.metrics = Metrics(self._replica_states)
        self.state = state or open_state(config.state.path, config.state.flush_interval_s,
                                         config.state.redis_url, config.state.timeout_s)
        self.auth = Authenticator(config.auth, state=self.state, on_reject=self._auth_rejected)
        self.faults = FaultInjector(config.faults, config.server, self.state, self.metrics)
        self.deployments: dict[str, PoolHandle] = {}
        self.fleet: RealtimeFleet | None = None  # every deployment, and the fleet that moves them
        self.started_at = time.time()
        self.draining = False  # graceful shutdown began: new requests are refused
        self.drain_event = asyncio.Event()  # set with `draining`: wakes what waits on purpose
        self.turns: set[Any] = set()  # turns in flight (gateway.turn.Turn)
        self.queues = overflow.QueueModel()
        self._step_s: dict[int, float] = {}  # id(scheduler) -> its last step's duration
        self._jobs: set[Job] = set()
        add_gauge(self.metrics, "fastmode_turns_in_flight", "Turns admitted and not yet ended "
                  "(a leak would show here)", lambda: len(self.turns))

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.state.start()
        self.fleet = RealtimeFleet(self.spec, self._stepped)  # backends.fleet: pools, tenants
        self.deployments = self.fleet.deployments
        self.fleet.start()

    def _stepped(self, replica: RealtimeReplica, result: StepResult) -> None:
        self._step_s[id(replica.scheduler)] = result.end - result.start

    def step_seconds(self, sched: Scheduler) -> float:
        """The duration of the replica's last step (0 before its first): the unit of the
        modeled queue wait (``overflow.QueueModel``)."""
        return self._step_s.get(id(sched), 0.0)

    def modeled_wait(self, sched: Scheduler) -> float:
        """Seconds a request arriving now would wait in this replica's queue (modeled)."""
        return self.queues.wait_steps(sched)[0] * self.step_seconds(sched)

    async def stop(self, drain_s: float = 30.0) -> None:
        """Let running requests finish (they are billed), then stop the replicas and flush
        the ledger."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_s
        while self._jobs and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for job in list(self._jobs):
            job.cancel()
            self.settle(job, 503, ended="shutdown")
        if self.fleet is not None:
            await self.fleet.stop()
        await self.state.close()

    def _auth_rejected(self, status: int, tier: str) -> None:
        self.metrics.auth_rejections.labels(str(status), tier).inc()

    def is_admin(self, headers: Mapping[str, str]) -> bool:
        """The admin key, as ``Authorization: Bearer`` (``[admin]``)."""
        admin = self.config.admin
        if not admin.enabled:
            return False
        scheme, _, token = (headers.get("authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and token.strip() == admin.key

    def _replica_states(self) -> Iterator[tuple[str, str, Scheduler]]:
        for name, dep in self.deployments.items():
            for r in dep.replicas:
                yield name, r.name, r.scheduler

    # -- routing (delegated) ---------------------------------------------------------------

    @property
    def models(self) -> list[str]:
        return self.router.models

    def resolve(self, model: str, fast: bool, flex: bool = False) -> Tier:
        return self.router.resolve(model, fast, flex)

    # -- admission ------------------------------------------------------------------------

    def admit(self, turn: TurnRequest, fast_full: bool = False,
              limits: dict[str, str] | None = None) -> Job:
        """Route, check limits, generate the reply and queue it in the engine.

        ``fast_full``: treat the fast pool as full (the ``fast-exhausted`` fault).
        ``limits``: the rate-limit headers of a take already awaited (``gateway.ratelimit``);
        None: take here, synchronously (buckets kept in this process).
        Raises APIError (404 model, 400 context, 401/403 auth, 429 limits/fast full, 503/429
        overload or a modeled queue wait over ``server.max_queue_wait_s``).
        """
        server = self.config.server
        if self.draining:
            raise shutting_down()
        principal = self.auth.authenticate(turn.authorization)
        tier = self.router.resolve(turn.model, turn.fast, turn.flex)
        requested = tier.name
        prompt = turn.prompt_tokens
        cap = self.router.max_output(tier, prompt, turn.max_tokens)
        headers = limits if limits is not None else self.auth.check(
            principal, tier.name, prompt + cap, prompt, cap,
            fast=turn.fast and tier.name != self.router.resolve(turn.model, False).name)
        gen = self._generate(turn, tier, cap)
        output = max(gen.output_tokens, 1)
        standard = self.router.resolve(turn.model, False)
        on_fast = turn.fast and requested != standard.name
        refused: _Refused | None = None
        stream: TokenStream | None = None
        try:
            if on_fast and fast_full:
                raise _Refused(server.retry_after_s, None)
            stream = self._submit(tier, prompt, output, turn.cached_tokens, turn.prefix)
        except _Refused as exc:
            refused = exc
        if stream is None and on_fast:
            assert refused is not None
            if server.fast_overflow != "downgrade":
                self.metrics.record(requested, 429)
                self.metrics.rejections.labels("fast_full", requested).inc()
                raise overflow.fast_full(requested, server, refused.retry_s)
            tier = standard
            self.metrics.downgrades.labels(tier.name).inc()
            try:
                stream = self._submit(tier, prompt, output, turn.cached_tokens, turn.prefix)
            except _Refused as exc:
                refused = exc
        if stream is None:
            assert refused is not None
            self.metrics.record(tier.name, server.overload_status)
            reason = "queue_full" if refused.wait_s is None else "queue_wait"
            self.metrics.rejections.labels(reason, tier.name).inc()
            if self.router.is_flex(turn.model, tier.name):  # flex answers 429 when busy
                raise flex_busy(tier.name, max(refused.retry_s, server.retry_after_s))
            raise overflow.overloaded(server, refused.retry_s, refused.wait_s)
        job = Job(
            id=new_id("req"),
            model=turn.model,
            tier=tier,
            requested_tier=requested,
            gen=gen,
            prompt_tokens=prompt,
            cached_tokens=min(stream.seq.cached_tokens, prompt),  # a continuation, or a hit
            stream=stream,
            created=int(time.time()),
            principal=principal,
            network_s=network_time.get(),  # emulated network time already slept (gateway.netem)
            headers=headers,
        )
        job.cache_write_tokens, job.cache_write_long_tokens = cache_writes(turn.prefix, stream)
        stream.tag = job  # the engine-side metrics read the reply's finish reason (vllm_metrics)
        stream.interval = tier.stream_interval  # tokens per event (read before the first wait)
        self._jobs.add(job)
        return job

    def _generate(self, turn: TurnRequest, tier: Tier, cap: int) -> Generation:
        r = turn.generation
        thinks = (r.effort not in (None, "none")) or r.thinking_budget is not None
        if thinks and not tier.behavior.reasoning.enabled:
            raise APIError(400, f"Unsupported parameter: '{turn.reasoning_param}' is not "
                           f"supported with the model `{turn.model}`.",
                           param=turn.reasoning_param, code="unsupported_parameter")
        # a request without its own cap: the server default caps the visible reply, and
        # reasoning may use the rest of the context window (as providers' defaults allow)
        room = 0 if turn.max_tokens is not None else max(
            0, tier.context_window - turn.prompt_tokens - cap)
        req = dataclasses.replace(r, max_tokens=cap, model=turn.model, reasoning_room=room)
        gen = generate(req, tier.quality, self.spec.scripts, tier.behavior)
        if gen.output_tokens == 0:  # e.g. a stop sequence at the very start: one empty token
            gen = Generation((), "", (), gen.finish_reason)
        return gen

    def _submit(self, tier: Tier, prompt: int, output: int, cached: int,
                prefix: PrefixKey | None = None) -> TokenStream:
        """Queue the request, or raise ``_Refused`` with the modeled time a retry would wait
        for: when the least-loaded replica's queue is full (until a slot of the pool frees),
        or its modeled wait is over ``server.max_queue_wait_s``."""
        dep = self.deployments[tier.deployment.name]
        replica = dep.choose(prefix, prompt)  # the replica the driver will pick
        sched = replica.scheduler
        wait_steps, _ = self.queues.wait_steps(sched)
        step_s = self.step_seconds(sched)
        bound = self.config.server.max_queue_wait_s
        if wait_steps * step_s > bound:
            wait = wait_steps * step_s
            raise _Refused(wait - bound, wait)
        try:
            return dep.submit(prompt, output, cached, prefix, tier.priority)
        except Overloaded:
            self.queues.forget(sched)
            raise _Refused(overflow.until_slot_frees(dep), None) from None
        except TooLarge:
            raise APIError(
                400,
                "The request's context does not fit in the KV cache of a replica.",
                param="messages",
                code="context_length_exceeded",
            ) from None

    # -- settlement -----------------------------------------------------------------------

    def settle(self, job: Job, status: int = 200, ended: str | None = None) -> None:
        """Count usage, cost and timings once, whether the job finished or was cut short, and
        hand its row to the ledger (written in the background)."""
        if settle(job, self.metrics, status, ended):
            self._jobs.discard(job)
            self.state.append_usage(job_row(job, status))

    def record(self, row: UsageRow) -> None:
        """A ledger row for a request refused before any work."""
        self.state.append_usage(row)


def shutting_down() -> APIError:
    return APIError(503, "The server is shutting down; retry on another instance.",
                    code="server_shutting_down", headers={"retry-after": "1"})
