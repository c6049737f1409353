"""Settlement: a job's usage, cost and timings counted exactly once, however it ended.

A finished job is billed for its whole reply; a job cut short (client gone, cancelled, server
stopping) for the tokens that reached the client, as providers bill.
"""

from __future__ import annotations

from backends.scheduler import CANCELLED

from .job import Job
from .metrics import Metrics


def billed_output(job: Job) -> int:
    return job.gen.output_tokens if job.finished else job.delivered


def settle(job: Job, metrics: Metrics, status: int = 200) -> bool:
    """Record the job once; returns False if it was already settled."""
    if job.settled:
        return False
    job.settled = True
    if not job.finished and job.stream.seq.state != CANCELLED:
        job.cancel()  # frees its batch slot and KV at the engine's next step
    output = billed_output(job)
    job.cost_usd = job.usage_cost(output)
    seq = job.stream.seq
    ttft = (seq.first_token_at - seq.arrival + job.network_s) if seq.first_token_at >= 0 else None
    itl = None
    if len(job.token_times) > 1:
        itl = (job.token_times[-1] - job.token_times[0]) / (len(job.token_times) - 1)
    if not job.finished:
        metrics.cancelled.labels(job.tier.name).inc()
    metrics.record(
        job.tier.name,
        status if job.finished else 499,
        prompt=job.prompt_tokens,
        cached=job.cached_tokens,
        output=output,
        cost=job.cost_usd,
        ttft=ttft,
        itl=itl,
    )
    return True
