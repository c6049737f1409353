"""Token-count distributions: how long prompts and replies are.

The simulator and the bench draw lengths from this one class, so that for one seed they agree on
every request (``fastmode bench --compare-sim`` compares the two on the very same requests).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from fastmode.workload.errors import WorkloadError

DistKind = Literal["fixed", "uniform", "lognormal"]
DIST_KINDS: tuple[str, ...] = ("fixed", "uniform", "lognormal")
LOGNORMAL_SIGMA = 0.8  # spread of lognormal lengths (ln-space sd): p99 is ~6x the median


@dataclass(frozen=True)
class LengthDist:
    """Token counts with a given mean: fixed, uniform on [mean/2, 3·mean/2], or lognormal.

    The lognormal's ln-space mean is shifted by -sigma²/2 so that ``mean`` is its mean, not its
    median: a workload of mean 2000 tokens costs what 2000-token requests cost on average.
    """

    kind: str
    mean: int

    def __post_init__(self) -> None:
        if self.kind not in DIST_KINDS:
            raise WorkloadError(
                f"distribution: unknown {self.kind!r}; allowed: {', '.join(DIST_KINDS)}"
            )
        if self.mean <= 0:
            raise WorkloadError(f"mean length: must be > 0, got {self.mean}")

    def sample(self, rng: random.Random) -> int:
        """One length; draws nothing for ``fixed`` (the stream stays where it was)."""
        if self.kind == "fixed":
            return self.mean
        if self.kind == "uniform":
            lo = max(1, self.mean // 2)
            return rng.randint(lo, max(lo, 2 * self.mean - lo))
        mu = math.log(self.mean) - LOGNORMAL_SIGMA**2 / 2
        return max(1, round(rng.lognormvariate(mu, LOGNORMAL_SIGMA)))
