"""The gateway's protocol-neutral core: a ``TurnRequest`` in, one ``Decision``, an admitted ``Job``.

``Gateway`` holds what every turn shares — the config, the router, auth, the fault injector,
the state backend (ledger, buckets, responses, settings), the metrics, the turns in flight
(for the stalled-reader watchdog and graceful shutdown) — and runs the one admission path of
every tier: ``decide`` resolves a request once (``gateway.pipeline.decision``), ``admit`` runs the
checks every tier gets (context window, the key's limits) and hands a ``Ticket`` to the tier's
backend (``gateway.engines.tickets``: the in-process engine, ``gateway.engines.engine_admission``, or a remote
pool, ``gateway.remote``), then applies the overflow policy of the role when the backend
refuses (``gateway.engines.overflow``). No physics and no wire format live here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

from fastmode.backends.drivers import PoolHandle, RealtimeFleet, RealtimeReplica
from fastmode.backends.engine import EngineSpec, Tier, build
from fastmode.backends.mockmodel import warm as warm_the_writer
from fastmode.backends.scheduler import Scheduler
from fastmode.gateway.cassettes.hooks import Cassettes
from fastmode.gateway.config import Config
from fastmode.gateway.engines import overflow
from fastmode.gateway.engines.engine_admission import EngineAdmission
from fastmode.gateway.engines.lora_registry import LoraRegistry
from fastmode.gateway.engines.tickets import Admission, Refused, Ticket
from fastmode.gateway.errors import APIError
from fastmode.gateway.faults import FaultInjector, Kind
from fastmode.gateway.observe.exchange_format import Redactor, load_hook
from fastmode.gateway.observe.metrics import Metrics, add_gauge
from fastmode.gateway.observe.trace_bodies import BodyBounds
from fastmode.gateway.observe.tracing import Traces
from fastmode.gateway.pipeline import ratelimit
from fastmode.gateway.pipeline.decision import decide
from fastmode.gateway.pipeline.routing import Router, busy
from fastmode.gateway.pipeline.settlement import settle
from fastmode.gateway.state import StateBackend, UsageRow, open_state
from fastmode.gateway.stored.ledger import job_row
from fastmode.gateway.testing import TestScopes
from fastmode.gateway.values.auth import Authenticator
from fastmode.gateway.values.decision import Decision
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest


class InFlight(Protocol):
    """A turn in flight as the stalled-reader watchdog and a graceful shutdown see it
    (``gateway.pipeline.turn.Turn``; a protocol so that this module need not import the pipeline)."""

    writing_since: float  # loop time the pending write began (0: none)
    writer: asyncio.Task[Any] | None
    abort: tuple[APIError, int, str, str] | None
    job: Job | None

    def end_with(self, error: APIError, status: int, ended: str, detail: str) -> None: ...


class Gateway:
    def __init__(self, config: Config, state: StateBackend | None = None) -> None:
        self.config = config
        self.spec: EngineSpec = build(config.sim())
        self.router = Router(config, self.spec)
        self.engine = EngineAdmission(self.spec, config.server)
        # LoRA adapters served as models of their own (gateway.engines.lora_registry)
        self.engine.loras = self.loras = LoraRegistry(config, self.spec)
        self.router.adapters = self.loras.bases
        self.metrics = Metrics(self.engine.replica_states)
        self.state = state or open_state(config.state.path, config.state.flush_interval_s,
                                         config.state.redis_url, config.state.timeout_s,
                                         config.state.pending_max)
        self.auth = Authenticator(config.auth, state=self.state, on_reject=self._auth_rejected)
        self.faults = FaultInjector(config.faults, config.server, self.state, self.metrics)
        # tier name -> the backend of a tier not served in process (``gateway.remote``)
        self.backends: dict[str, Admission] = {}
        self.cassettes: Cassettes | None = None  # --record / --replay (gateway.cassettes)
        self.started_at = time.time()
        self.draining = False  # graceful shutdown began: new requests are refused
        self.drain_event = asyncio.Event()  # set with `draining`: wakes what waits on purpose
        self.turns: set[InFlight] = set()  # turns in flight
        server = config.server  # ground truth per request (gateway.tracing)
        self.traces = Traces(server.trace_all, server.trace_keep, server.trace_file,
                             server.trace_bodies, BodyBounds(server.trace_body_string_chars,
                                                             server.trace_body_max_bytes),
                             Redactor(config.record.redact, load_hook(config.record.redact_hook)))
        # per-test replies, counted faults and journal (gateway.testing; the pytest plugin)
        self.tests = TestScopes()
        self.engine.tests = self.faults.tests = self.tests
        add_gauge(self.metrics, "fastmode_turns_in_flight", "Turns admitted and not yet ended "
                  "(a leak would show here)", lambda: len(self.turns))

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.state.start()
        warm_the_writer()  # its phrase bank, ~60 ms: before any request, not in the first
        self.engine.start()
        if self.engine.fleet is not None:  # traces in the engine's modeled seconds
            self.traces.to_model = self.engine.fleet.driver.clock.to_model

    @property
    def deployments(self) -> dict[str, PoolHandle]:
        return self.engine.deployments

    @property
    def fleet(self) -> RealtimeFleet | None:
        return self.engine.fleet

    def step_seconds(self, sched: Scheduler) -> float:
        return self.engine.step_seconds(sched)

    def modeled_wait(self, replica: RealtimeReplica) -> float:
        """Seconds a request arriving now would wait in this replica's queue (modeled)."""
        return self.engine.modeled_wait(replica)

    async def stop(self, drain_s: float = 30.0) -> None:
        """Let running requests finish (they are billed), then stop the replicas and flush
        the ledger."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_s
        jobs = self.engine.jobs
        while jobs and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for job in list(jobs):
            job.cancel()
            self.settle(job, 503, ended="shutdown")
        await self.engine.stop()
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
        return self.engine.replica_states()

    # -- the decision -----------------------------------------------------------------------

    @property
    def models(self) -> list[str]:
        return self.router.models

    def decide(self, request: TurnRequest, headers: Mapping[str, str] | None = None,
               param: str = "service_tier") -> Decision:
        """Resolve a request once: who asks, which role and tier serve it, which fault it
        drew. Raises APIError (503 draining, 401, 404 model, 400 role not offered)."""
        if self.draining:
            raise shutting_down()
        return decide(self.router, self.auth, self.faults, request.model, request.role,
                      request.authorization, headers or {}, param)

    def backend(self, tier: Tier) -> Admission:
        """Who admits on ``tier``: its remote pool, else the in-process engine."""
        return self.backends.get(tier.name, self.engine)

    # -- admission: one path for every tier -------------------------------------------------

    async def admit(self, request: TurnRequest, decision: Decision | None = None, *,
                    stream: bool | None = None,
                    disconnected: Callable[[], Awaitable[None]] | None = None) -> Job:
        """Check the request against its tier (context window, the key's limits), admit it on
        the tier's backend, and apply the role's overflow policy if the backend refuses:
        a premium role downgrades to standard (``server.fast_overflow = "downgrade"``) or
        answers 429; a role that is busy "later" (flex) answers 429; any other, the overload
        status. Raises APIError."""
        if decision is None:
            decision = self.decide(request)
        if self.draining:
            raise shutting_down()
        tier, prompt = decision.tier, request.prompt_tokens
        cap = self.router.max_output(tier, prompt, request.max_tokens)
        headers = await ratelimit.take(self.auth, self.state, self.config.state.limits_fail_open,
                                       self.metrics, decision.principal, tier.name, prompt + cap,
                                       prompt, cap, fast=decision.role.premium)
        fault = decision.fault
        ticket = Ticket(
            request, decision, tier, decision.role, cap, headers,
            stream=request.stream if stream is None else stream,
            pool_full=(fault is not None and fault.kind is Kind.FAST_EXHAUSTED
                       and decision.on_premium_pool),
            disconnected=disconnected,
        )
        try:
            return await self.backend(tier).admit(ticket)
        except Refused as refused:
            if not decision.on_premium_pool:
                raise self._refusal(ticket, refused) from None
            server = self.config.server
            if server.fast_overflow != "downgrade":
                self.metrics.record(tier.name, 429)
                self.metrics.rejections.labels("fast_full", tier.name).inc()
                raise overflow.fast_full(decision.role.name, server,
                                         refused.retry_s) from None
        standard = decision.standard
        self.metrics.downgrades.labels(standard.name).inc()
        ticket = dataclasses.replace(
            ticket, tier=standard, role=decision.standard_role, pool_full=False,
            cap=self.router.max_output(standard, prompt, request.max_tokens))
        try:
            return await self.backend(standard).admit(ticket)
        except Refused as refused:
            raise self._refusal(ticket, refused) from None

    def _refusal(self, ticket: Ticket, refused: Refused) -> APIError:
        """The answer to a refusal with nowhere else to go, counted once."""
        tier, server = ticket.tier.name, self.config.server
        if refused.error is not None:  # the backend's own answer (an upstream's 429 / 503)
            self.metrics.record(tier, refused.error.status)
            return refused.error
        self.metrics.record(tier, server.overload_status)
        reason = "queue_full" if refused.wait_s is None else "queue_wait"
        self.metrics.rejections.labels(reason, tier).inc()
        if ticket.role.busy == "retry_later":  # flex answers 429 when busy
            return busy(ticket.role, max(refused.retry_s, server.retry_after_s))
        return overflow.overloaded(server, refused.retry_s, refused.wait_s, refused.queue)

    # -- settlement -----------------------------------------------------------------------

    def settle(self, job: Job, status: int = 200, ended: str | None = None) -> None:
        """Count usage, cost and timings once, whether the job finished or was cut short, and
        hand its row to the ledger (written in the background)."""
        if settle(job, self.metrics, status, ended):
            self.engine.jobs.discard(job)
            self.state.append_usage(job_row(job, status))

    def record(self, row: UsageRow) -> None:
        """A ledger row for a request refused before any work."""
        self.state.append_usage(row)


def shutting_down() -> APIError:
    return APIError(503, "The server is shutting down; retry on another instance.",
                    code="server_shutting_down", headers={"retry-after": "1"})
