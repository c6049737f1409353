"""The decision: what a request asked for, resolved once, the value every later step reads.

``gateway.pipeline.decision.decide`` makes it (who is asking, which role and tier serve the
model, which fault the request drew); admission, the backends' tickets, the encoders (which
echo the *role*, never a tier's name), the ledger and the metrics read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmode.backends.engine import Tier
from fastmode.backends.pricing import Prices
from fastmode.gateway.values.auth import Principal
from fastmode.gateway.values.fault_spec import Fault
from fastmode.gateway.values.price_eras import PriceRule
from fastmode.gateway.values.roles import STANDARD, Role


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
    pricing: PriceRule | None = None  # the model's prices per role (``gateway.values.price_eras``)
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
