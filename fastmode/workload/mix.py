"""The tier mix: which share of the requests goes to which tier.

``parse_mix`` reads ``standard=0.7,fast=0.2,spark=0.1`` for every command that takes one;
``TierPicker`` turns shares into a tier per request with one uniform draw, the same way on both
sides so that one seed picks the same tiers in the simulator and in the bench.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping

from fastmode.workload.errors import WorkloadError


def parse_mix(
    text: str, flag: str = "mix", known: Collection[str] | None = None
) -> dict[str, float]:
    """``TIER=SHARE,...`` -> shares as written (not normalised; a tier named twice adds up).

    ``flag`` names the option in messages (``--mix`` for the bench); with ``known``, a tier not
    in it is refused with the list of allowed ones. Empty items (``a=1,``) are skipped.
    """
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise WorkloadError(f"{flag}: expected TIER=SHARE[,TIER=SHARE...], got {part!r}")
        if known is not None and name not in known:
            raise WorkloadError(
                f"{flag}: unknown tier {name!r}; allowed: {', '.join(sorted(known))}"
            )
        try:
            share = float(value)
        except ValueError:
            raise WorkloadError(f"{flag}: share of {name!r} is not a number: {value!r}") from None
        if not share >= 0 or math.isinf(share):
            raise WorkloadError(f"{flag}: share of {name!r} must be >= 0, got {value}")
        mix[name] = mix.get(name, 0.0) + share
    if sum(mix.values()) <= 0:
        raise WorkloadError(f"{flag}: the shares add up to 0")
    return mix


def normalise_mix(mix: Mapping[str, float]) -> dict[str, float]:
    """Shares summing to 1, zero shares dropped."""
    total = sum(mix.values())
    if total <= 0:
        raise WorkloadError("mix: the shares add up to 0")
    return {k: v / total for k, v in mix.items() if v > 0}


class TierPicker:
    """Picks a tier per request: one ``rng.random()`` against the cumulative shares.

    Tiers with a zero share are never picked; the shares need not be normalised (they are,
    here, once). The last tier takes the rounding slack, so a draw always lands somewhere.
    """

    __slots__ = ("names", "cum")

    def __init__(self, mix: Mapping[str, float]) -> None:
        self.names = [n for n, w in mix.items() if w > 0]
        if not self.names:
            raise WorkloadError("mix: the shares add up to 0")
        total = sum(mix[n] for n in self.names)
        acc = 0.0
        self.cum: list[float] = []
        for n in self.names:
            acc += mix[n] / total
            self.cum.append(acc)

    def pick(self, rng: random.Random) -> int:
        """Index into ``names`` of the next request's tier."""
        u = rng.random()
        cum = self.cum
        i = 0
        while i < len(cum) - 1 and u >= cum[i]:
            i += 1
        return i
