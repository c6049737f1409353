"""A turn's rate-limit take, awaited, and what an unavailable store means.

A key's buckets may live in Redis (``[state] redis_url``), where taking from them is a network
round trip that must not run on the event loop as a blocking call (a hung Redis would freeze
every request of the process). ``Gateway.admit`` awaits ``take`` in the precheck every tier
gets, in-process or remote; the take itself is ``Authenticator.check_async`` (the same buckets,
the same 403/429 as the synchronous ``check``).

When the store does not answer (``StateUnavailable``): a 503 with ``retry-after`` in the route's
own format (the default), or, with ``[state] limits_fail_open = true``, the request goes ahead
with its limit not counted and no rate-limit headers (counted in
``fastmode_state_limits_fail_open_total``). Keys without a limit never touch the store here.
"""

from __future__ import annotations

from fastmode.gateway.observe.metrics import Metrics
from fastmode.gateway.state import StateBackend, StateUnavailable
from fastmode.gateway.values.auth import Authenticator, Principal


async def take(auth: Authenticator, state: StateBackend, fail_open: bool, metrics: Metrics,
               principal: Principal | None, tier: str, tokens: int,
               input_tokens: int | None = None, output_tokens: int = 0,
               fast: bool = False) -> dict[str, str]:
    """``auth.check_async`` under the ``[state]`` policy for an unavailable store."""
    try:
        return await auth.check_async(principal, tier, tokens, input_tokens, output_tokens,
                                      fast=fast)
    except StateUnavailable:
        if not fail_open:
            metrics.rejections.labels("state_unavailable", tier).inc()
            raise
        state.health.limits_fail_open += 1
        return {}
