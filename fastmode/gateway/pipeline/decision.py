"""One decision per request: what it asked for, resolved once, read by every later step.

A protocol's translation gives a ``TurnRequest`` (the wire's words turned into a role, a
prompt, a cap...). ``decide`` then resolves, once, what the rest of the turn needs and never
resolves again: who is asking (authentication runs here and only here), which role and tier
serve the model, and which fault the request drew. Admission (``gateway.pipeline.admission``), the
encoders (which echo the *role*, never a tier's name), the ledger and the metrics all read
this value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fastmode.backends.engine import Tier
from fastmode.backends.pricing import Prices
from fastmode.gateway.faults import TEST_ID_HEADER, Fault, FaultInjector
from fastmode.gateway.pipeline.auth import Authenticator, Principal
from fastmode.gateway.pipeline.price_eras import PriceRule
from fastmode.gateway.pipeline.roles import STANDARD, Role
from fastmode.gateway.pipeline.routing import Router


@dataclass(frozen=True)
class Decision:
    model: str
    asked: str  # the role the request asked for (its protocol's vocabulary)
    role: Role  # the role that serves it (``Router.route``: the asked one, or standard)
    tier: Tier  # the tier serving that role for this model
    standard: Tier  # the model's standard tier: where a premium role overflows to
    principal: Principal | None  # None: auth is off
    fault: Fault | None  # the fault it drew (``gateway.faults``), before any is applied
    standard_role: Role = STANDARD  # the standard role as this model echoes it (a downgrade's)
    pricing: PriceRule | None = None  # the model's prices per role (``gateway.pipeline.price_eras``)
    test_id: str = ""  # the request's x-fastmode-test-id (``gateway.testing``)

    def prices(self, role: Role, tier: Tier) -> Prices:
        """What the request pays per MTok when ``role`` on ``tier`` serves it: the model's
        price era for the role, else the tier's own prices."""
        if self.pricing is None:
            return tier.prices
        return self.pricing.prices(role.name, tier)

    @property
    def api_key(self) -> str:
        return self.principal.key.key if self.principal is not None else ""

    @property
    def on_premium_pool(self) -> bool:
        """A premium role on a pool of its own (where ``fast-exhausted`` and the overflow
        policy apply)."""
        return self.role.premium and self.tier is not self.standard


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
