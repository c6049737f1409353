"""One request of a batch, answered as its endpoint answers it, on the batch pool.

A batch line is a whole request body for an endpoint (Chat Completions, Completions, the
Responses API, Anthropic Messages). It goes through the endpoint's own protocol — bounds,
validation, translation, the key's access to the model, the mock model — so a line the endpoint
would refuse gets that endpoint's error, and one it would serve gets its usual body. What
differs is where it runs: not on a live pool but on the modeled batch pool
(``backends.batch_pool``), which says when it finishes; so its ``Job`` carries a finished
``DoneStream`` with those modeled times (``time_info`` shows the wait for a slot as
``queue_time``) and the batch tier's prices (the standard tier's times the pool's factor).
Nothing streams: a ``stream: true`` line is answered whole.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

from fastmode.backends.engine import Tier
from fastmode.backends.scheduler import FINISHED
from fastmode.gateway.errors import bad_request
from fastmode.gateway.http.limits import check_request
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.protocols import CHAT, COMPLETIONS, RESPONSES, Protocol, RequestContext
from fastmode.gateway.state import COMPLETED
from fastmode.gateway.stored.response_store import ResponseStore
from fastmode.gateway.values.ids import new_id
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.roles import STANDARD

BATCH_TIER = "batch"  # the ledger's tier for batch requests
OPENAI_ENDPOINTS: dict[str, Protocol] = {
    "/v1/chat/completions": CHAT, "/v1/completions": COMPLETIONS,
    "/v1/responses": RESPONSES,
}


@dataclass
class DoneSeq:
    """A request the batch pool has finished: its modeled times, from submission (0)."""

    arrival: float
    admitted_at: float
    first_token_at: float
    finished_at: float
    state: str = FINISHED


class DoneStream:
    """A ``TokenSource`` that has produced everything, at the modeled batch-pool times."""

    since = 0.0
    tag: Any = None
    interval = 1

    def __init__(self, seq: DoneSeq, output: int, step_s: float, reasoning: int) -> None:
        self.seq = seq
        self.delivered = output
        self._step = step_s
        self._reasoning = reasoning

    @property
    def last_at(self) -> float:
        return self.seq.finished_at

    @property
    def watched_at(self) -> float:
        return self.token_at(self._reasoning) if self._reasoning else -1.0

    def take(self) -> int:
        return 0

    def ready(self) -> Awaitable[None] | None:
        return None

    def token_at(self, k: int) -> float:
        return min(self.seq.first_token_at + k * self._step, self.seq.finished_at)

    def due_at(self, start: int, count: int) -> float:
        return self.token_at(start + count - 1)

    def produced(self) -> int:
        return self.delivered

    def host_lag(self) -> tuple[float, float]:
        return 0.0, 0.0  # modeled ahead on a virtual clock: no host in the way

    def cancel(self) -> None:
        return None

    def __aiter__(self) -> AsyncIterator[int]:
        return self._none()

    async def _none(self) -> AsyncIterator[int]:
        return
        yield  # an async generator that yields nothing


@dataclass
class Prepared:
    """A line's request, generated: its job and what its endpoint's encoder needs."""

    job: Job
    protocol: Protocol
    req: Any
    turn: Any

    def body(self) -> dict[str, Any]:
        """The endpoint's response body for the finished job."""
        body: dict[str, Any] = self.protocol.encoder(self.job, self.req, self.turn).body()
        return body


def batch_tier(gateway: Gateway, tier: Tier, factor: float) -> Tier:
    return dataclasses.replace(tier, name=BATCH_TIER, prices=tier.prices.scaled(factor))


def prepare(gateway: Gateway, protocol: Protocol, body: Any, headers: Mapping[str, str],
            factor: float) -> Prepared:
    """The request of one line, generated (not yet timed): its job, or the endpoint's APIError."""
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.", param="body")
    body = {**body, "stream": False}
    check_request(protocol.name, body, gateway.config.limits)
    req = protocol.validate(body)
    store = ResponseStore(gateway.state)
    turn = protocol.translate(req, RequestContext(headers, False, store))
    decision = gateway.decide(turn, headers)
    tier = gateway.router.route(turn.model, STANDARD.name).tier
    cap = gateway.router.max_output(tier, turn.prompt_tokens, turn.max_tokens)
    gen = gateway.engine.generate(turn, tier, cap)  # the mock model, as the engine runs it
    seq = DoneSeq(0.0, 0.0, 0.0, 0.0)
    job = Job(id=new_id("req"), model=turn.model, tier=batch_tier(gateway, tier, factor),
              role=STANDARD, requested_tier=BATCH_TIER, gen=gen,
              prompt_tokens=turn.prompt_tokens, cached_tokens=0,
              stream=DoneStream(seq, gen.output_tokens, 0.0, gen.reasoning_tokens),
              created=int(time.time()), principal=decision.principal,
              protocol=protocol.name, transport="batch")
    return Prepared(job, protocol, req, turn)


def timed(job: Job, start_s: float, finish_s: float, step_s: float) -> None:
    """Give a prepared job its modeled times: a slot from ``start_s``, done at ``finish_s``."""
    out = job.gen.output_tokens
    first = max(start_s, finish_s - max(out - 1, 0) * step_s)
    seq = DoneSeq(0.0, start_s, first, finish_s)
    job.stream = DoneStream(seq, out, step_s, job.gen.reasoning_tokens)


def settle(job: Job) -> None:
    """The job's bill, as settlement fills it for a finished turn."""
    job.settled = True
    job.ended = COMPLETED
    job.generated = job.billed_output = job.gen.output_tokens
    job.cost_usd = job.usage_cost()


