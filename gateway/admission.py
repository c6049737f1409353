"""The gateway's protocol-neutral core: a ``TurnRequest`` in, an admitted ``Job`` out.

``Gateway`` owns the in-process deployments (one real-time driver per deployment), routes a
request to its tier, checks auth and limits, asks the mock model for the whole reply, and
queues it in the engine, applying the overflow policy when the tier is full. No physics and no
wire format live here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from backends.drivers import Overloaded, RealtimeDeployment, TokenStream, TooLarge
from backends.engine import EngineSpec, Tier, build
from backends.mockmodel import Generation, GenerationRequest, generate
from backends.scheduler import Scheduler

from . import overflow
from .auth import Authenticator
from .config import Config
from .errors import APIError
from .ids import new_id
from .job import Job
from .metrics import Metrics
from .netem import network_time
from .request import TurnRequest
from .routing import Router
from .settlement import settle


class Gateway:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.spec: EngineSpec = build(config.sim())
        self.router = Router(config, self.spec)
        self.auth = Authenticator(config.auth)
        self.deployments: dict[str, RealtimeDeployment] = {}
        self.metrics = Metrics(self._replica_states)
        self.started_at = time.time()
        self._jobs: set[Job] = set()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        for name, spec in self.spec.deployments.items():
            dep = RealtimeDeployment(spec)
            dep.start()
            self.deployments[name] = dep

    async def stop(self, drain_s: float = 30.0) -> None:
        """Let running requests finish (they are billed), then stop the replicas."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_s
        while self._jobs and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for job in list(self._jobs):
            job.cancel()
            self.settle(job, 499)
        for dep in self.deployments.values():
            await dep.stop()

    def _replica_states(self) -> Iterator[tuple[str, str, Scheduler]]:
        for name, dep in self.deployments.items():
            for r in dep.replicas:
                yield name, r.name, r.scheduler

    # -- routing (delegated) ---------------------------------------------------------------

    @property
    def models(self) -> list[str]:
        return self.router.models

    def resolve(self, model: str, fast: bool) -> Tier:
        return self.router.resolve(model, fast)

    # -- admission ------------------------------------------------------------------------

    def admit(self, turn: TurnRequest) -> Job:
        """Route, check limits, generate the reply and queue it in the engine.

        Raises APIError (404 model, 400 context, 401/403 auth, 429 limits/fast full, 503/429
        overload).
        """
        principal = self.auth.authenticate(turn.authorization)
        tier = self.router.resolve(turn.model, turn.fast)
        requested = tier.name
        prompt = turn.prompt_tokens
        cap = self.router.max_output(tier, prompt, turn.max_tokens)
        headers = self.auth.check(principal, tier.name, prompt + cap)
        gen = self._generate(turn, tier, cap)
        output = max(gen.output_tokens, 1)
        stream = self._submit(tier, prompt, output, turn.cached_tokens)
        standard = self.router.resolve(turn.model, False)
        if stream is None and turn.fast and requested != standard.name:
            if self.config.server.fast_overflow != "downgrade":
                self.metrics.record(requested, 429)
                raise overflow.fast_full(requested, self.config.server)
            tier = standard
            self.metrics.downgrades.labels(tier.name).inc()
            stream = self._submit(tier, prompt, output, turn.cached_tokens)
        if stream is None:
            self.metrics.record(tier.name, self.config.server.overload_status)
            raise overflow.overloaded(self.config.server)
        job = Job(
            id=new_id("req"),
            model=turn.model,
            tier=tier,
            requested_tier=requested,
            gen=gen,
            prompt_tokens=prompt,
            cached_tokens=min(turn.cached_tokens, prompt),
            stream=stream,
            created=int(time.time()),
            principal=principal,
            network_s=network_time.get(),  # emulated network time already slept (gateway.netem)
            headers=headers,
        )
        self._jobs.add(job)
        return job

    def _generate(self, turn: TurnRequest, tier: Tier, cap: int) -> Generation:
        r = turn.generation
        req = GenerationRequest(
            messages=r.messages,
            max_tokens=cap,
            stop=r.stop,
            seed=r.seed,
            temperature=r.temperature,
            tools=r.tools,
            tool_choice=r.tool_choice,
            ignore_eos=r.ignore_eos,
            model=turn.model,
        )
        gen = generate(req, tier.quality, self.spec.scripts)
        if gen.output_tokens == 0:  # e.g. a stop sequence at the very start: one empty token
            gen = Generation((), "", (), gen.finish_reason)
        return gen

    def _submit(self, tier: Tier, prompt: int, output: int, cached: int) -> TokenStream | None:
        dep = self.deployments[tier.deployment.name]
        try:
            return dep.submit(prompt, output, cached)
        except Overloaded:
            return None
        except TooLarge:
            raise APIError(
                400,
                "The request's context does not fit in the KV cache of a replica.",
                param="messages",
                code="context_length_exceeded",
            ) from None

    # -- settlement -----------------------------------------------------------------------

    def settle(self, job: Job, status: int = 200) -> None:
        """Count usage, cost and timings once, whether the job finished or was cut short."""
        if settle(job, self.metrics, status):
            self._jobs.discard(job)
