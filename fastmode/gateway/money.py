"""Dollar amounts: the one rounding and the one printed form of every cost the gateway shows.

A cost is kept in whole nano-dollars (``COST_DIGITS``): the body's ``usage.cost_usd``, the
ledger's rows and totals, the batches' sums. ``cost_text`` prints that number with all its
digits, so a header (``x-fastmode-cost-usd``) reads back as the very float the body and the
ledger hold.
"""

from __future__ import annotations

COST_DIGITS = 9  # whole nano-dollars: no float noise (0.00029000000000000006)


def cost(usd: float) -> float:
    """An amount as it is kept: rounded to whole nano-dollars."""
    return round(usd, COST_DIGITS)


def cost_text(usd: float) -> str:
    """The printed form (fixed point, every kept digit): ``float(cost_text(x)) == cost(x)``."""
    return f"{cost(usd):.{COST_DIGITS}f}"
