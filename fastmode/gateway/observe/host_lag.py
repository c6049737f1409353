"""Host lag: when the machine, not the model, set a stream's pace, say so.

A real-time replica that is served late (an admission burst held the event loop, the host is
busy) slips its modeled timeline instead of catching up (``backends.drivers.realtime``): the
lateness becomes latency that the model did not ask for. The engine reports each slip once
(``RealtimeDriver.on_lag``); here it is

* counted in ``fastmode_host_lag_seconds{deployment}``, a histogram of slips (its ``_sum`` is
  the time the model's timeline moved, its ``_count`` how many times);
* logged as one warning at most once a minute (``WARN_EVERY_S``), naming the tiers of the
  deployment that slipped and what to do about it;
* shown by the dashboard (``gateway.dashboard.feed`` reads the replicas' own totals).

Nothing runs per token, per request or per step: only when a replica slips.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import HistogramMetricFamily, Metric

from fastmode.backends.drivers import RealtimeReplica
from fastmode.gateway.observe.tier_metrics import Hist

log = logging.getLogger("fastmode.engine")

WARN_EVERY_S = 60.0
NAME = "fastmode_host_lag_seconds"
DOC = ("Time a replica's steps were served late, beyond the timer granularity, by a busy event "
       "loop or host: each slip moved the model's timeline (the streams' latency) by this much, "
       "once")
BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class HostLag:
    """The gateway's side of host lag (see the module doc)."""

    def __init__(self, gateway: Any, clock: Callable[[], float] | None = None) -> None:
        self.gateway = gateway
        self.clock = clock
        # deployment -> its slips and when its series began: plain numbers until a scrape
        # (``collect``: what prometheus_client's ``Histogram`` exposed, without its lock and
        # bucket scan per slip)
        self._series: dict[str, tuple[Hist, float]] = {}
        gateway.metrics.registry.register(self)
        self._warned_at: float | None = None
        self._since: dict[str, list[float]] = {}  # deployment -> [slips, seconds, worst]

    def attach(self) -> None:
        """After each ``Gateway.start`` (a new engine): its replicas' slips come here."""
        fleet = self.gateway.fleet
        if fleet is not None:
            fleet.driver.on_lag = self.lagged
            if self.clock is None:
                self.clock = lambda: fleet.driver.now

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        """``fastmode_host_lag_seconds``, one series per deployment that slipped."""
        hist = HistogramMetricFamily(NAME, DOC, labels=["deployment"])
        for dep, (h, created) in self._series.items():
            hist.add_metric([dep], h.buckets(), h.sum)
            hist.add_sample(f"{NAME}_created", {"deployment": dep}, created)
        yield hist

    def tiers(self, deployment: str) -> list[str]:
        return [t.name for t in self.gateway.spec.tiers.values()
                if t.deployment.name == deployment]

    def lagged(self, replica: RealtimeReplica, seconds: float) -> None:
        """One slip of ``replica``'s timeline by ``seconds``."""
        dep = replica.deployment
        series = self._series.get(dep)
        if series is None:
            series = self._series[dep] = (Hist(BUCKETS), time.time())
        series[0].observe(seconds)
        acc = self._since.setdefault(dep, [0.0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += seconds
        acc[2] = max(acc[2], seconds)
        now = self.clock() if self.clock is not None else 0.0
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY_S:
            return
        first = self._warned_at is None
        self._warned_at = now
        parts = []
        for name, (slips, total, worst) in sorted(self._since.items()):
            tiers = ", ".join(self.tiers(name)) or name
            parts.append(f"tier {tiers} (deployment {name}): {slips:.0f} slip(s), "
                         f"{total * 1e3:.0f} ms in all, the longest {worst * 1e3:.0f} ms")
        self._since.clear()
        log.warning(
            "host lag%s: the event loop served replica steps late, so streams were slower "
            "than modeled (their timeline slipped; fastmode_host_lag_seconds): %s. Give the "
            "server more CPU: set stream_interval (e.g. 8) on a very fast tier, or run more "
            "gateway processes (fastmode serve --workers N); docs/streaming.md",
            "" if first else " since the last warning", "; ".join(parts))
