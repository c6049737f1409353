"""A weighted histogram with logarithmic buckets, for latency percentiles of long simulations.

Bucket ``i`` holds values in ``[base**i, base**(i+1))``; with ``base = 1.01`` each bucket is 1%
wide, so a percentile read from the histogram is within ~0.5% of the exact one, in O(buckets)
memory however many values went in. ``add_range`` spreads a weight uniformly over an interval:
a stretch of steady decode steps whose durations grow linearly from one value to another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class LogHistogram:
    base: float = 1.01
    weights: dict[int, float] = field(default_factory=dict)
    total: float = 0.0
    weighted_sum: float = 0.0  # sum of value x weight: the exact mean
    _inv_log_base: float = field(init=False, repr=False, default=0.0)

    def __post_init__(self) -> None:
        if not self.base > 1:
            raise ValueError(f"base: must be > 1, got {self.base}")
        self._inv_log_base = 1.0 / math.log(self.base)

    def _index(self, x: float) -> int:
        return math.floor(math.log(x) * self._inv_log_base)

    def add(self, x: float, weight: float = 1.0) -> None:
        if weight <= 0 or x <= 0:
            return
        i = self._index(x)
        self.weights[i] = self.weights.get(i, 0.0) + weight
        self.total += weight
        self.weighted_sum += x * weight

    def add_range(self, lo: float, hi: float, weight: float) -> None:
        """Spread ``weight`` uniformly over ``[lo, hi]``."""
        if hi < lo:
            lo, hi = hi, lo
        if weight <= 0 or lo <= 0:
            return
        i, j = self._index(lo), self._index(hi)
        if i == j:
            self.add((lo + hi) / 2, weight)
            return
        width = hi - lo
        w = self.weights
        for k in range(i, j + 1):
            a = max(lo, self.base**k)
            b = min(hi, self.base ** (k + 1))
            if b > a:
                w[k] = w.get(k, 0.0) + weight * (b - a) / width
        self.total += weight
        self.weighted_sum += (lo + hi) / 2 * weight

    def merge(self, other: LogHistogram) -> None:
        for k, v in other.weights.items():
            self.weights[k] = self.weights.get(k, 0.0) + v
        self.total += other.total
        self.weighted_sum += other.weighted_sum

    @property
    def mean(self) -> float:
        return self.weighted_sum / self.total if self.total else math.nan

    def quantile(self, q: float) -> float:
        """The value below which a share ``q`` of the weight lies (bucket's geometric middle)."""
        if not self.total:
            return math.nan
        target = q * self.total
        acc = 0.0
        keys = sorted(self.weights)
        for k in keys:
            acc += self.weights[k]
            if acc >= target:
                return math.pow(self.base, k + 0.5)
        return math.pow(self.base, keys[-1] + 0.5)
