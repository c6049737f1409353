"""Prices per tier: given for the reference tier, derived from hardware cost for the others.

A token's cost to the provider is the hardware's price for the time of one step, shared by the
sequences of that step: ``chips x hourly price x step time / batch``. The fast tier runs the
same model on the same hardware with a ~15x smaller batch, so each of its tokens carries ~15x the
hardware time while arriving ~2.5x sooner: ~6x the price. Deriving it instead of typing it in is
the point: change the batch or the hardware and the price follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmode.backends.background import Background
from fastmode.backends.perf import Placement


@dataclass(frozen=True)
class Prices:
    """USD per million tokens."""

    input: float
    cached_input: float
    output: float

    def scaled(self, factor: float) -> Prices:
        return Prices(self.input * factor, self.cached_input * factor, self.output * factor)

    def cost(self, prompt_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        """USD for one request; ``prompt_tokens`` includes the cached ones."""
        fresh = prompt_tokens - cached_tokens
        return (
            fresh * self.input + cached_tokens * self.cached_input + output_tokens * self.output
        ) / 1e6


def operating_step_seconds(placement: Placement, background: Background) -> float:
    """One decode step at the deployment's modeled operating point: the background load plus one
    more sequence (the user's). What one more user sees, and what a token costs."""
    batch = background.seqs + 1
    return placement.step_seconds(
        batch,
        batch * background.context_tokens,
        background.prefill_tokens_per_step,
        background.prefill_context,
    )


def hardware_cost_per_token(placement: Placement, background: Background,
                            extra_chips: int = 0) -> float:
    """USD of hardware time per output token at the deployment's modeled operating point
    (``extra_chips``: a disaggregated deployment's prefill chips, paid as well)."""
    hourly = (placement.chips + extra_chips) * placement.hardware.price_per_hour_usd
    step = operating_step_seconds(placement, background)
    return hourly / 3600.0 * step / (background.seqs + 1)
