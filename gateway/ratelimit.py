"""A turn's rate-limit take, awaited before admission, and what an unavailable store means.

``Gateway.admit`` is synchronous: it decides, it never waits. A key's buckets may live in Redis
(``[state] redis_url``), where taking from them is a network round trip that must not run on the
event loop as a blocking call (a hung Redis would freeze every request of the process). So a
turn awaits ``take_for_turn`` just before it calls ``admit`` and hands it the headers
(``admit(limits=...)``); the take itself is ``Authenticator.check_async`` (the same buckets,
the same 403/429 as the synchronous ``check``, which direct callers of ``admit`` still get).

When the store does not answer (``StateUnavailable``): a 503 with ``retry-after`` in the route's
own format (the default), or, with ``[state] limits_fail_open = true``, the request goes ahead
with its limit not counted and no rate-limit headers (counted in
``fastmode_state_limits_fail_open_total``). Keys without a limit never touch the store here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .auth import Principal
from .state import StateUnavailable

if TYPE_CHECKING:
    from .admission import Gateway
    from .request import TurnRequest


async def take(gw: Gateway, principal: Principal | None, tier: str, tokens: int,
               input_tokens: int | None = None, output_tokens: int = 0,
               fast: bool = False) -> dict[str, str]:
    """``gw.auth.check_async`` under the ``[state]`` policy for an unavailable store."""
    try:
        return await gw.auth.check_async(principal, tier, tokens, input_tokens, output_tokens,
                                         fast=fast)
    except StateUnavailable:
        if not gw.config.state.limits_fail_open:
            gw.metrics.rejections.labels("state_unavailable", tier).inc()
            raise
        gw.state.health.limits_fail_open += 1
        return {}


async def take_for_turn(gw: Gateway, turn: TurnRequest) -> dict[str, str]:
    """The take ``Gateway.admit`` would make for ``turn`` (same tier, same token counts), as
    an await; its headers go to ``admit(limits=...)``."""
    principal = gw.auth.authenticate(turn.authorization)
    if principal is None:
        return {}
    tier = gw.router.resolve(turn.model, turn.fast, turn.flex)
    prompt = turn.prompt_tokens
    cap = gw.router.max_output(tier, prompt, turn.max_tokens)
    fast = turn.fast and tier.name != gw.router.resolve(turn.model, False).name
    return await take(gw, principal, tier.name, prompt + cap, prompt, cap, fast=fast)
