"""The per-request Prometheus families of each tier, kept as plain numbers until a scrape.

``fastmode_requests``, the token and cost counters and the TTFT / ITL histograms change once per
request. Through ``prometheus_client``'s ``Counter`` and ``Histogram`` that is eight updates,
each taking a lock and, for a histogram, scanning its buckets in Python: ~44,000 instructions
per request under callgrind, 2.8% of a short streamed request's whole server cost.
Here a request adds to a tier's slots and bisects each histogram once; the families are built
when ``/metrics`` is scraped, with the names, labels, buckets and ``_created`` samples the
client library gave them, so the exposition is unchanged. Updates come from the event loop's
thread only (settlement), so no lock is needed.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric


class Hist:
    """A cumulative histogram (Prometheus ``le`` buckets) that takes weighted observations."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.sum += value * n

    def buckets(self) -> list[tuple[str, float]]:
        """``(le, cumulative count)`` pairs, ``+Inf`` last, as exposition writes them."""
        out, acc = [], 0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += c
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(acc)))
        return out


class TierStats:
    """One tier's counters since the process started."""

    __slots__ = ("created", "requests", "since", "prompt", "cached", "output", "cost", "ttft",
                 "itl")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.created = time.time()
        self.requests: dict[int, int] = {}  # HTTP status -> requests
        self.since: dict[int, float] = {}  # HTTP status -> its first request (``_created``)
        self.prompt = 0
        self.cached = 0
        self.output = 0
        self.cost = 0.0
        self.ttft = Hist(buckets)
        self.itl = Hist(buckets)


# (family, documentation, TierStats slot); a counter is only exposed once it was incremented,
# as prometheus_client's labelled children are only created on first use
_COUNTERS = (
    ("fastmode_prompt_tokens", "Prompt tokens billed, by tier", "prompt"),
    ("fastmode_cached_prompt_tokens", "Cached prompt tokens, by tier", "cached"),
    ("fastmode_output_tokens", "Output tokens billed, by tier", "output"),
    ("fastmode_cost_usd", "Dollars billed, by tier", "cost"),
)
_HISTOGRAMS = (
    ("fastmode_ttft_seconds", "Modeled time to first token", "ttft"),
    ("fastmode_itl_seconds", "Modeled mean inter-token latency, one sample per request", "itl"),
)


class TierFamilies:
    """A registry collector over every tier's ``TierStats``."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.tiers: dict[str, TierStats] = {}

    def stats(self, tier: str) -> TierStats:
        s = self.tiers.get(tier)
        if s is None:
            s = self.tiers[tier] = TierStats(self.buckets)
        return s

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self.families()

    def families(self, only: str | None = None) -> Iterator[Metric]:
        """The families (or the one named ``only``), built from the numbers now."""
        if only in (None, "fastmode_requests"):
            fam = CounterMetricFamily("fastmode_requests", "Requests by tier and HTTP status",
                                      labels=["tier", "status"])
            for tier, s in self.tiers.items():
                for status, n in s.requests.items():
                    fam.add_metric([tier, str(status)], n, created=s.since[status])
            yield fam
        for name, doc, slot in _COUNTERS:
            if only not in (None, name):
                continue
            fam = CounterMetricFamily(name, doc, labels=["tier"])
            for tier, s in self.tiers.items():
                if s.requests:  # the tier's series exist from its first request
                    fam.add_metric([tier], getattr(s, slot), created=s.created)
            yield fam
        for name, doc, slot in _HISTOGRAMS:
            if only not in (None, name):
                continue
            hist = HistogramMetricFamily(name, doc, labels=["tier"])
            for tier, s in self.tiers.items():
                h: Hist = getattr(s, slot)
                if s.requests:
                    hist.add_metric([tier], h.buckets(), h.sum)
                    hist.add_sample(f"{name}_created", {"tier": tier}, s.created)
            yield hist


class Family:
    """One of those families, read alone (the dashboard's feed reads them one by one)."""

    def __init__(self, families: TierFamilies, name: str) -> None:
        self._families, self.name = families, name

    def collect(self) -> Iterator[Metric]:
        return self._families.families(self.name)
