"""One decision per request: what it asked for, resolved once, read by every later step.

A protocol's translation gives a ``TurnRequest`` (the wire's words turned into a role, a
prompt, a cap...). ``decide`` then resolves, once, what the rest of the turn needs and never
resolves again: who is asking (authentication runs here and only here), which role and tier
serve the model, and which fault the request drew — a ``Decision`` (``gateway.values.decision``)
that admission (``gateway.pipeline.admission``), the encoders (which echo the *role*, never a
tier's name), the ledger and the metrics all read.
"""

from __future__ import annotations

from collections.abc import Mapping

from fastmode.gateway.faults import TEST_ID_HEADER, FaultInjector
from fastmode.gateway.pipeline.routing import Router
from fastmode.gateway.values.auth import Authenticator
from fastmode.gateway.values.decision import Decision


def decide(router: Router, auth: Authenticator, faults: FaultInjector, model: str,
           asked: str, authorization: str | None, headers: Mapping[str, str],
           param: str = "service_tier") -> Decision:
    """Authenticate, route, draw the fault: APIError 401 / 404 / 400 on the way."""
    principal = auth.authenticate(authorization)
    routed = router.route(model, asked, param)
    key = principal.key.key if principal is not None else ""
    fault = faults.draw(headers, tier=routed.tier.name, key=key, model=model)
    return Decision(model, asked, routed.role, routed.tier, routed.standard, principal, fault,
                    routed.standard_role, routed.pricing, headers.get(TEST_ID_HEADER, ""))
