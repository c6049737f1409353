"""The upstreams of one remote tier: least-outstanding selection and health state."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily

from fastmode.gateway.config import RemoteTierConfig


@dataclass(eq=False)
class Upstream:
    url: str
    tier: str
    healthy: bool = True
    outstanding: int = 0
    last_error: str = ""
    checked_at: float = 0.0


class UpstreamPool:
    """The upstreams of one tier: selection and health state."""

    def __init__(self, tier: str, cfg: RemoteTierConfig) -> None:
        self.tier = tier
        self.cfg = cfg
        self.upstreams = [Upstream(url, tier) for url in cfg.upstreams]
        self._turn = 0
        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
        self.auth = {"authorization": f"Bearer {key}"} if key else {}

    def pick(self, exclude: set[Upstream]) -> Upstream | None:
        """Least outstanding among the healthy upstreams not yet tried; when none of the pool
        is healthy, the untried unhealthy ones (a stale check must not stop all traffic)."""
        left = [u for u in self.upstreams if u not in exclude]
        if not left:
            return None
        if any(u.healthy for u in self.upstreams):
            left = [u for u in left if u.healthy]
            if not left:
                return None
        n = len(left)
        start = self._turn % n
        self._turn += 1
        best = min(range(n), key=lambda i: (left[(start + i) % n].outstanding, i))
        return left[(start + best) % n]

    def mark_down(self, up: Upstream, why: str) -> None:
        up.healthy = False
        up.last_error = why

    def mark_up(self, up: Upstream) -> None:
        up.healthy = True
        up.last_error = ""


class _PoolCollector:
    """``fastmode_upstream_up`` and ``fastmode_upstream_outstanding``, read at scrape time."""

    def __init__(self, pools: dict[str, UpstreamPool]) -> None:
        self._pools = pools

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["tier", "upstream"]
        up = GaugeMetricFamily("fastmode_upstream_up",
                               "1 while the upstream is in rotation", labels=labels)
        out = GaugeMetricFamily("fastmode_upstream_outstanding",
                                "Requests in flight on the upstream", labels=labels)
        for pool in self._pools.values():
            for u in pool.upstreams:
                up.add_metric([pool.tier, u.url], 1.0 if u.healthy else 0.0)
                out.add_metric([pool.tier, u.url], u.outstanding)
        yield up
        yield out
