"""Request shapes (tier, prompt length, output length), drawn in one canonical order.

The order of draws from the random stream is the contract between ``fastmode simulate`` and
``fastmode bench --compare-sim``: per request, the tier (one uniform draw), then the prompt
length, then the output length; in an open loop the arrival gap comes before all three. Both
sides draw through this class, so with one seed, mix and length distributions they see the
same requests at the same offsets. Anything else a side wants to randomise (the bench's prompt
words, which requests carry tools) must come from its own stream, never from this one.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from fastmode.workload.arrivals import open_loop_times
from fastmode.workload.lengths import LengthDist
from fastmode.workload.mix import TierPicker


@dataclass(frozen=True, slots=True)
class RequestShape:
    """What the workload decides about one request; each side dresses it up its own way."""

    tier: str
    prompt_tokens: int
    output_tokens: int


class ShapeSampler:
    """Draws ``RequestShape``s for a tier mix and two length distributions."""

    def __init__(self, mix: Mapping[str, float], prompt: LengthDist, output: LengthDist) -> None:
        self.picker = TierPicker(mix)
        self.prompt = prompt
        self.output = output

    @property
    def tiers(self) -> list[str]:
        """The tiers with a share above zero, in mix order."""
        return self.picker.names

    def draw(self, rng: random.Random) -> RequestShape:
        """The next request from ``rng``: tier, then prompt, then output length."""
        tier = self.picker.names[self.picker.pick(rng)]
        prompt = self.prompt.sample(rng)
        output = self.output.sample(rng)
        return RequestShape(tier, prompt, output)

    def timed(
        self, rate: float, arrivals: str, rng: random.Random
    ) -> Iterator[tuple[float, RequestShape]]:
        """Open loop: endless (arrival time, request) pairs, gap then request, from one stream.

        The pair is drawn when it is taken; a caller that stops at a duration takes one pair
        past it, which only moves ``rng`` past the end of the run.
        """
        for t in open_loop_times(rate, arrivals, rng):
            yield t, self.draw(rng)
