"""What a model id bills for each role: its price era, apart from the tier that serves it.

A tier's prices come from physics (``backends.engine``: the reference tier's list prices times
the tier's hardware cost per token relative to it), and that is what ``frontier`` bills. But
providers price fast modes per model, not per machine: Anthropic charges 6x for Claude Opus
4.6's fast mode and 2x for Opus 5's, on what is, as far as anyone outside can tell, the same
kind of pool. So a route (``[routes.MODEL]``) may carry its own rule:

* ``prices``: the model's standard list prices (USD per MTok). Without them, the rule starts
  from the reference tier's.
* ``price_factor``: per role, a multiple of those prices (6 for the Opus 4.6 era, 2 for the
  current one). A role without one bills its tier's own multiple of the reference tier (the
  derived ~6.2x of the fast pool, ~8x of the ultrafast one), ``standard`` the list prices.

The multiple applies to every price of the role, as providers apply it: input, cached input
(cache reads) and, through the input price, cache writes (``gateway.values.caching``: 1.25x / 2x the
input price). A request is billed by the role and tier that *served* it: a premium request
downgraded to standard pays the model's standard prices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fastmode.backends.engine import Tier
from fastmode.backends.pricing import Prices
from fastmode.gateway.config import RouteConfig
from fastmode.gateway.values.roles import STANDARD


@dataclass(frozen=True)
class PriceRule:
    """One model id's prices per role (see the module doc). ``base`` None and no factors: the
    tiers' own prices, unchanged."""

    reference: Prices  # the reference tier's prices (``[pricing] reference_tier``)
    base: Prices | None = None  # the model's list prices
    factors: Mapping[str, float] = field(default_factory=dict)  # role -> multiple of base

    @classmethod
    def of_route(cls, route: RouteConfig, reference: Prices) -> PriceRule:
        base = Prices(**route.prices.model_dump()) if route.prices is not None else None
        return cls(reference, base, dict(route.price_factor))

    def prices(self, role: str, tier: Tier) -> Prices:
        """What a request served by ``role`` on ``tier`` pays per MTok."""
        if self.base is None and not self.factors:
            return tier.prices
        base = self.base if self.base is not None else self.reference
        factor = self.factors.get(role)
        if factor is not None:
            return base.scaled(factor)
        if role == STANDARD.name:
            return base
        return relative(base, tier.prices, self.reference)


def relative(base: Prices, tier: Prices, reference: Prices) -> Prices:
    """``base`` times the tier's multiple of the reference, price by price (a price the
    reference gives as 0 keeps the tier's own)."""

    def one(b: float, t: float, r: float) -> float:
        return b * t / r if r else t

    return Prices(one(base.input, tier.input, reference.input),
                  one(base.cached_input, tier.cached_input, reference.cached_input),
                  one(base.output, tier.output, reference.output))
