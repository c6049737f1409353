"""Settlement: a job's usage, cost and timings counted exactly once, however it ended.

A finished job is billed for its whole reply. A job cut short (the client went away or
cancelled, a reader too slow, the server stopping) is billed, as providers bill, for the tokens
the engine had generated when the end was seen: those it delivered plus those still in flight
to a slow reader. The ledger row (``gateway.stored.ledger``) says how it ended and both counts.
"""

from __future__ import annotations

from fastmode.backends.scheduler import CANCELLED
from fastmode.gateway.observe.metrics import Metrics
from fastmode.gateway.state import CANCELLED as ENDED_CANCELLED
from fastmode.gateway.state import COMPLETED
from fastmode.gateway.values.job import Job


def generated_tokens(job: Job) -> int:
    """Tokens the engine has produced for ``job`` so far (read before cancelling it)."""
    if job.finished:
        return job.gen.output_tokens
    return job.stream.produced()


def billed_output(job: Job) -> int:
    return job.gen.output_tokens if job.finished else generated_tokens(job)


def settle(job: Job, metrics: Metrics, status: int = 200, ended: str | None = None) -> bool:
    """Record the job once; returns False if it was already settled."""
    if job.settled:
        return False
    job.settled = True
    finished = job.finished
    job.generated = generated_tokens(job)
    if not finished and job.stream.seq.state != CANCELLED:
        job.cancel()  # frees its batch slot and KV at the engine's next step
    output = job.billed_output = job.gen.output_tokens if finished else job.generated
    job.ended = ended or (COMPLETED if finished and status == 200 else ENDED_CANCELLED)
    job.cost_usd = job.usage_cost(output)
    seq = job.stream.seq
    ttft = (seq.first_token_at - seq.arrival + job.network_s) if seq.first_token_at >= 0 else None
    itl = None
    if job.delivered > 1 and seq.first_token_at >= 0:
        itl = (job.last_token_at - seq.first_token_at) / (job.delivered - 1)
    if not finished:
        metrics.cancelled.labels(job.tier.name).inc()
    metrics.record(
        job.tier.name,
        status if finished or status != 200 else 499,
        prompt=job.prompt_tokens,
        cached=job.cached_tokens,
        output=output,
        cost=job.cost_usd,
        ttft=ttft,
        itl=itl,
    )
    return True
