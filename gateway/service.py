"""The gateway's protocol-neutral core: request -> tier -> backend, and usage -> price.

The OpenAI Chat, Responses and websocket front ends all call ``Gateway.admit`` with a normalised
request and get a ``Job``: the mock model's whole reply (``Generation``), the engine's token
stream that paces it, and the bookkeeping (usage, price, modeled times) that ``Gateway.settle``
records exactly once, however the request ends. No physics lives here.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any

from backends.drivers import Overloaded, RealtimeDeployment, TokenStream, TooLarge
from backends.engine import EngineSpec, Tier, build
from backends.scheduler import CANCELLED, FINISHED
from backends.textgen import Generation, GenerationRequest, generate

from .auth import Authenticator, Principal
from .config import Config
from .errors import APIError, retry_headers
from .metrics import Metrics
from .netem import network_time

FAST_SERVICE_TIERS = {"priority", "fast"}
# OpenAI's vocabulary for the tier that served a request
SERVICE_TIER_NAMES = {"standard": "default", "fast": "priority"}


def service_tier_label(tier: str) -> str:
    return SERVICE_TIER_NAMES.get(tier, "default")


_counter = itertools.count(1)
_prefix = os.urandom(3).hex()


def new_id(kind: str) -> str:
    return f"{kind}-{_prefix}{next(_counter):08x}"


@dataclass(eq=False)
class Job:
    """One admitted request from submission to settlement."""

    id: str
    model: str
    tier: Tier
    requested_tier: str
    gen: Generation
    prompt_tokens: int
    cached_tokens: int
    stream: TokenStream
    created: int
    principal: Principal | None = None
    network_s: float = 0.0  # modeled network time before the first token (emulated RTT)
    delivered: int = 0  # tokens handed to the client so far
    token_times: list[float] = field(default_factory=list)
    settled: bool = False
    cost_usd: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def downgraded(self) -> bool:
        return self.requested_tier != self.tier.name

    @property
    def finished(self) -> bool:
        return self.stream.seq.state == FINISHED

    def usage_cost(self, output_tokens: int | None = None) -> float:
        out = self.gen.output_tokens if output_tokens is None else output_tokens
        return self.tier.prices.cost(self.prompt_tokens, self.cached_tokens, out)

    def time_info(self) -> dict[str, float]:
        """Modeled times in seconds (Cerebras' ``time_info`` convention)."""
        seq = self.stream.seq
        arrival = seq.arrival
        admitted = seq.admitted_at if seq.admitted_at >= 0 else arrival
        first = seq.first_token_at if seq.first_token_at >= 0 else admitted
        last = self.token_times[-1] if self.token_times else first
        queue = max(0.0, admitted - arrival)
        prompt = max(0.0, first - admitted)
        completion = max(0.0, last - first)
        return {
            "queue_time": queue + self.network_s,
            "prompt_time": prompt,
            "completion_time": completion,
            "total_time": queue + prompt + completion + self.network_s,
            "network_time": self.network_s,  # emulated RTTs, included in queue_time
            "created": float(self.created),
        }

    async def tokens(self):
        """Yield lists of (index, modeled time) as the engine produces them."""
        async for times in self.stream:
            start = self.delivered
            self.delivered += len(times)
            self.token_times.extend(times)
            yield start, times

    def cancel(self) -> None:
        self.stream.cancel()


class Gateway:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.spec: EngineSpec = build(config.sim())
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
        deadline = asyncio.get_running_loop().time() + drain_s
        while self._jobs and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for job in list(self._jobs):
            job.cancel()
            self.settle(job, 499)
        for dep in self.deployments.values():
            await dep.stop()

    def _replica_states(self):
        for name, dep in self.deployments.items():
            for r in dep.replicas:
                yield name, r.name, r.scheduler

    # -- routing --------------------------------------------------------------------------

    @property
    def models(self) -> list[str]:
        return list(self.config.routes)

    def resolve(self, model: str, fast: bool) -> Tier:
        route = self.config.routes.get(model)
        if route is None:
            raise APIError(
                404,
                f"The model `{model}` does not exist or you do not have access to it. "
                f"Available: {', '.join(self.models)}.",
                param="model",
                code="model_not_found",
            )
        return self.spec.tiers[route.fast if fast else route.standard]

    def max_output(self, tier: Tier, prompt_tokens: int, requested: int | None) -> int:
        """The output cap: the request's, else the server default, within the context window."""
        window = tier.context_window
        if requested is not None:
            if prompt_tokens + requested > window:
                raise APIError(
                    400,
                    f"This model's maximum context length is {window} tokens. However, you "
                    f"requested {prompt_tokens + requested} tokens ({prompt_tokens} in the "
                    f"messages, {requested} in the completion). Please reduce the length of "
                    f"the messages or completion.",
                    param="messages",
                    code="context_length_exceeded",
                )
            return requested
        if prompt_tokens >= window:
            raise APIError(
                400,
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {prompt_tokens} tokens. Please reduce the length of "
                f"the messages.",
                param="messages",
                code="context_length_exceeded",
            )
        return min(self.config.server.default_max_tokens, window - prompt_tokens)

    # -- admission ------------------------------------------------------------------------

    def admit(
        self,
        *,
        model: str,
        fast: bool,
        request: GenerationRequest,
        prompt_tokens: int,
        max_tokens: int | None,
        cached_tokens: int = 0,
        authorization: str | None = None,
    ) -> Job:
        """Route, check limits, generate the reply and queue it in the engine.

        Raises APIError (404 model, 400 context, 401/403 auth, 429 limits/fast full, 503/429
        overload).
        """
        principal = self.auth.authenticate(authorization)
        tier = self.resolve(model, fast)
        requested = tier.name
        cap = self.max_output(tier, prompt_tokens, max_tokens)
        headers = self.auth.check(principal, tier.name, prompt_tokens + cap)
        req = GenerationRequest(
            messages=request.messages,
            max_tokens=cap,
            stop=request.stop,
            seed=request.seed,
            temperature=request.temperature,
            tools=request.tools,
            tool_choice=request.tool_choice,
            ignore_eos=request.ignore_eos,
            model=model,
        )
        gen = generate(req, tier.quality, self.spec.scripts)
        if gen.output_tokens == 0:  # e.g. a stop sequence at the very start: one empty token
            gen = Generation((), "", (), gen.finish_reason)
        stream = self._submit(tier, prompt_tokens, max(gen.output_tokens, 1), cached_tokens)
        if stream is None and fast and requested != self.resolve(model, False).name:
            if self.config.server.fast_overflow == "downgrade":
                tier = self.resolve(model, False)
                self.metrics.downgrades.labels(tier.name).inc()
                stream = self._submit(tier, prompt_tokens, max(gen.output_tokens, 1),
                                      cached_tokens)
            else:
                self.metrics.record(requested, 429)
                raise APIError(
                    429,
                    f"The {requested} tier is at capacity. Retry shortly or use the standard "
                    "tier.",
                    code="rate_limit_exceeded",
                    type="requests",
                    headers=retry_headers(self.config.server.retry_after_s),
                )
        if stream is None:
            status = self.config.server.overload_status
            self.metrics.record(tier.name, status)
            raise APIError(
                status,
                "The server is overloaded: the engine's waiting queue is full. Retry shortly.",
                code="server_is_overloaded" if status == 503 else "rate_limit_exceeded",
                type="service_unavailable_error" if status == 503 else "requests",
                headers=retry_headers(self.config.server.retry_after_s),
            )
        job = Job(
            id=new_id("req"),
            model=model,
            tier=tier,
            requested_tier=requested,
            gen=gen,
            prompt_tokens=prompt_tokens,
            cached_tokens=min(cached_tokens, prompt_tokens),
            stream=stream,
            created=int(time.time()),
            principal=principal,
            network_s=network_time.get(),  # emulated network time already slept (gateway.netem)
            headers=headers,
        )
        self._jobs.add(job)
        return job

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
        if job.settled:
            return
        job.settled = True
        self._jobs.discard(job)
        if not job.finished and job.stream.seq.state != CANCELLED:
            job.cancel()
        # A request cut short is billed for the tokens that reached the client.
        output = job.gen.output_tokens if job.finished else job.delivered
        job.cost_usd = job.usage_cost(output)
        seq = job.stream.seq
        ttft = (seq.first_token_at - seq.arrival + job.network_s) if seq.first_token_at >= 0 else None
        itl = None
        if len(job.token_times) > 1:
            itl = (job.token_times[-1] - job.token_times[0]) / (len(job.token_times) - 1)
        if not job.finished:
            self.metrics.cancelled.labels(job.tier.name).inc()
        self.metrics.record(
            job.tier.name,
            status if job.finished else 499,
            prompt=job.prompt_tokens,
            cached=job.cached_tokens,
            output=output,
            cost=job.cost_usd,
            ttft=ttft,
            itl=itl,
        )

    def usage_dict(self, job: Job, chat: bool = True) -> dict[str, Any]:
        out = job.gen.output_tokens
        if chat:
            return {
                "prompt_tokens": job.prompt_tokens,
                "completion_tokens": out,
                "total_tokens": job.prompt_tokens + out,
                "prompt_tokens_details": {"cached_tokens": job.cached_tokens, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0},
                "cost_usd": job.usage_cost(),
            }
        return {
            "input_tokens": job.prompt_tokens,
            "input_tokens_details": {"cached_tokens": job.cached_tokens},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": job.prompt_tokens + out,
            "cost_usd": job.usage_cost(),
        }
