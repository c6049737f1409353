"""The in-process backend of a tier: the mock model writes the reply, a deployment queues it.

``EngineAdmission`` owns the real-time deployments (``backends.drivers``): it generates the
whole reply for the ticket's tier, picks the replica the driver will pick, and queues the
request — or raises ``Refused`` with the modeled time a retry would wait for, when the
replica's queue is full or its modeled wait is over ``server.max_queue_wait_s``
(``gateway.engines.overflow``). It implements the ``Admission`` interface (``gateway.engines.tickets``); what a
refusal means for the request's role is the shared front's decision, not this module's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastmode.backends.drivers import (
    Overloaded,
    PoolHandle,
    RealtimeFleet,
    RealtimeReplica,
    TokenStream,
    TooLarge,
)
from fastmode.backends.engine import EngineSpec, Tier
from fastmode.backends.lora import LoraAdapter
from fastmode.backends.mockmodel import Generation, generate
from fastmode.backends.prefix_cache import PrefixKey
from fastmode.backends.scheduler import Scheduler, StepResult
from fastmode.backends.sleep import SleepState
from fastmode.backends.token_ids import Vocabulary
from fastmode.gateway.config import ServerConfig
from fastmode.gateway.engines import data_parallel, overflow
from fastmode.gateway.engines.block_keys import block_prefix
from fastmode.gateway.engines.kv_transfer import KVTransfer
from fastmode.gateway.engines.tickets import Refused, Ticket
from fastmode.gateway.errors import APIError
from fastmode.gateway.http.netem import network_time
from fastmode.gateway.values.caching import cache_writes
from fastmode.gateway.values.ids import new_id
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest

if TYPE_CHECKING:
    from fastmode.gateway.engines.lora_registry import LoraRegistry
    from fastmode.gateway.testing import TestScopes


class EngineAdmission:
    def __init__(self, spec: EngineSpec, server: ServerConfig) -> None:
        self.spec = spec
        self.server = server
        self.deployments: dict[str, PoolHandle] = {}
        self.fleet: RealtimeFleet | None = None  # every deployment, and the fleet that moves them
        self.queues = overflow.QueueModel()
        self.jobs: set[Job] = set()  # admitted and not yet settled (a graceful stop waits)
        self._step_s: dict[int, float] = {}  # id(scheduler) -> its last step's duration
        self.vocabulary = Vocabulary()  # token ids: /tokenize and the prefix cache's blocks
        self.sleep = SleepState()  # vLLM's sleep mode (gateway.endpoints.vllm_api)
        self.tests: TestScopes | None = None  # per-test replies and journal (gateway.testing)
        self.loras: LoraRegistry | None = None  # LoRA adapters (gateway.engines.lora_registry)
        self.kv = KVTransfer()  # P/D across engines: vLLM's kv_transfer_params

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        # backends.fleet: pools, tenants; played at the server's time scale
        self.fleet = RealtimeFleet(self.spec, self._stepped, self.server.time_scale)
        self.deployments = self.fleet.deployments
        self.fleet.start()

    async def stop(self) -> None:
        if self.fleet is not None:
            await self.fleet.stop()

    def _stepped(self, replica: RealtimeReplica, result: StepResult) -> None:
        # the model's step (a host that served it late slipped its end: not the model's)
        self._step_s[id(replica.scheduler)] = result.end - result.start - result.slip

    def step_seconds(self, sched: Scheduler) -> float:
        """The duration of the replica's last step (0 before its first): the unit of the
        modeled queue wait (``overflow.QueueModel``)."""
        return self._step_s.get(id(sched), 0.0)

    def modeled_wait(self, replica: RealtimeReplica) -> float:
        """Seconds a request arriving now would wait in this replica's queue (modeled)."""
        sched = replica.scheduler
        step_s = self.step_seconds(sched)
        return self.queues.wait_steps(sched, self._relief(replica, step_s))[0] * step_s

    @staticmethod
    def _relief(replica: RealtimeReplica, step_s: float) -> tuple[int, int]:
        """Counted from the replica's next step start, not the clock: the same all through a
        step, so the queue model's play-forward stays cached across a burst's submissions."""
        tenants = replica.tenants
        return (0, 0) if tenants is None else overflow.relief(tenants, replica.next_start,
                                                              step_s)

    def replica_states(self) -> Iterator[tuple[str, str, Scheduler]]:
        for name, dep in self.deployments.items():
            for r in dep.replicas:
                yield name, r.name, r.scheduler

    # -- admission ------------------------------------------------------------------------

    async def admit(self, ticket: Ticket) -> Job:
        return self.admit_now(ticket)

    def admit_now(self, ticket: Ticket, reply: Generation | None = None,
                  scripted: bool = False) -> Job:
        """The reply generated and queued (no await: an in-process admission never waits).
        ``reply``: a reply written elsewhere (a recorded one, ``gateway.cassettes``; a test's
        scripted one for a remote tier, ``scripted``: ``gateway.pipeline.per_test``) to queue
        instead of the mock model's."""
        request, tier = ticket.request, ticket.tier
        if self.sleep.asleep:
            raise APIError(503, "The engine is sleeping (POST /wake_up wakes it).",
                           code="engine_sleeping")
        scope = self.tests.get(ticket.decision.test_id) if self.tests is not None else None
        if reply is None and scope is not None:
            r = request.generation
            reply = scope.scripted(r.messages, ticket.cap, tuple(r.stop))
            scripted = reply is not None
        gen = self._generate(request, tier, ticket.cap) if reply is None else reply
        if ticket.pool_full:
            raise Refused(self.server.retry_after_s)
        prompt = request.prompt_tokens
        prefix = request.prefix
        lora = self.loras.get(request.model) if self.loras is not None else None
        dep = tier.deployment
        if dep.kv_blocks is not None:  # vLLM's blocks (an engine's cache)
            prefix = block_prefix(self.vocabulary, request, dep.kv_blocks,
                                  lora.name if lora is not None else None,
                                  lora.int_id if lora is not None else None)
        remote = self.kv.remote_prefill(request.kv_transfer, dep, prompt)  # P/D: a decoder's
        cached = request.cached_tokens if remote is None else remote.tokens
        stream = self._submit(tier, prompt, max(gen.output_tokens, 1), cached, prefix, lora,
                              request.dp_rank)
        if remote is not None:  # read when it is admitted, at the replica's next step
            stream.seq.remote_kv_s = remote.seconds
        decision = ticket.decision
        job = Job(
            id=new_id("req"),
            model=request.model,
            tier=tier,
            role=ticket.role,
            requested_tier=decision.tier.name,
            gen=gen,
            prompt_tokens=prompt,
            cached_tokens=min(stream.seq.cached_tokens, prompt),  # a continuation, or a hit
            stream=stream,
            created=int(time.time()),
            principal=decision.principal,
            network_s=network_time.get(),  # emulated network time already slept (gateway.netem)
            headers=dict(ticket.headers),
            prices=ticket.prices,
        )
        job.cache_write_tokens, job.cache_write_long_tokens = cache_writes(prefix, stream)
        job.kv_transfer_asked = request.kv_transfer is not None
        if self.kv.hands_over(request.kv_transfer, dep) and gen.finish_reason == "length":
            job.kv_transfer_params = self.kv.prefill_params(dep, job.id, prompt)
        stream.tag = job  # the engine-side metrics read the reply's finish reason (vllm_metrics)
        stream.interval = tier.stream_interval  # tokens per event (read before the first wait)
        if gen.reasoning_tokens:
            stream.watch = gen.reasoning_tokens  # keep its time: reasoning_time
        self.jobs.add(job)
        if scope is not None:
            scope.note(job, request, scripted)
        return job

    def generate(self, request: TurnRequest, tier: Tier, cap: int) -> Generation:
        """The mock model's reply on ``tier`` (a batch line's too: ``gateway.batches``)."""
        return self._generate(request, tier, cap)

    def _generate(self, request: TurnRequest, tier: Tier, cap: int) -> Generation:
        if not request.generate:  # a warm-up: prefill only (one engine step, nothing shown)
            return Generation((), "", (), "stop")
        r = request.generation
        thinks = (r.effort not in (None, "none")) or r.thinking_budget is not None
        if thinks and not tier.behavior.reasoning.enabled:
            raise APIError(400, f"Unsupported parameter: '{request.reasoning_param}' is not "
                           f"supported with the model `{request.model}`.",
                           param=request.reasoning_param, code="unsupported_parameter")
        # a request without its own cap: the server default caps the visible reply, and
        # reasoning may use the rest of the context window (as providers' defaults allow)
        room = 0 if request.max_tokens is not None else max(
            0, tier.context_window - request.prompt_tokens - cap)
        req = r.capped(cap, request.model, room)
        gen = generate(req, tier.quality, self.spec.scripts, tier.behavior)
        if gen.output_tokens == 0:  # e.g. a stop sequence at the very start: one empty token
            gen = Generation((), "", (), gen.finish_reason)
        return gen

    def _submit(self, tier: Tier, prompt: int, output: int, cached: int,
                prefix: PrefixKey | None = None, lora: LoraAdapter | None = None,
                dp_rank: str | None = None) -> TokenStream:
        """Queue the request, or raise ``Refused`` with the modeled time a retry would wait
        for: when the least-loaded replica's queue is full, or its modeled wait is over
        ``server.max_queue_wait_s``."""
        dep = self.deployments[tier.deployment.name]
        if self.server.engine:  # vLLM's data-parallel ranks (gateway.engines.data_parallel)
            replica = data_parallel.pick(dep.replicas, dp_rank)
        else:
            replica = dep.choose(prefix, prompt)  # the replica the driver will pick
        sched = replica.scheduler
        step_s = self.step_seconds(sched)
        wait_steps, _ = self.queues.wait_steps(sched, self._relief(replica, step_s))
        bound = self.server.max_queue_wait_s
        if wait_steps * step_s > bound:
            wait = wait_steps * step_s
            raise Refused(wait - bound, wait)
        try:
            return dep.submit(prompt, output, cached, prefix, tier.priority, replica, lora)
        except Overloaded:
            self.queues.forget(sched)
            raise Refused(overflow.until_slot_frees(dep),
                          queue=(len(sched.waiting), sched.queued_elsewhere)) from None
        except TooLarge:
            raise APIError(
                400,
                "The request's context does not fit in the KV cache of a replica.",
                param="messages",
                code="context_length_exceeded",
            ) from None
