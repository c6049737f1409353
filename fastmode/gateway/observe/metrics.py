"""Prometheus metrics, one registry per app (tests run several apps in one process).

Counters and histograms are updated once per request, never per token; replica gauges (batch
occupancy, waiting queue, KV use) are read from the schedulers at scrape time, so the hot path
pays nothing for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fastmode.backends.scheduler import Scheduler
from fastmode.gateway.observe.tier_metrics import Family, TierFamilies


class Rendered(Protocol):
    """A collector that writes its own exposition text (``gateway.observe.vllm_metrics``)."""

    def render(self) -> bytes: ...


LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60,
)


class Metrics:
    def __init__(self, replicas: Callable[[], Iterable[tuple[str, str, Scheduler]]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # the per-request families, as plain numbers until a scrape (gateway.tier_metrics)
        self.tiers = TierFamilies(LATENCY_BUCKETS)
        r.register(self.tiers)
        self.requests = Family(self.tiers, "fastmode_requests")
        self.prompt_tokens = Family(self.tiers, "fastmode_prompt_tokens")
        self.cached_tokens = Family(self.tiers, "fastmode_cached_prompt_tokens")
        self.output_tokens = Family(self.tiers, "fastmode_output_tokens")
        self.cost = Family(self.tiers, "fastmode_cost_usd")
        self.ttft = Family(self.tiers, "fastmode_ttft_seconds")
        self.itl = Family(self.tiers, "fastmode_itl_seconds")
        self.downgrades = Counter(
            "fastmode_downgrades", "Fast requests served by another tier", ["to"], registry=r
        )
        self.cancelled = Counter(
            "fastmode_cancelled", "Requests cancelled before they finished", ["tier"], registry=r
        )
        self.faults = Counter(
            "fastmode_faults_injected", "Faults injected on purpose (x-fastmode-fault, rules)",
            ["kind", "tier"], registry=r,
        )
        self.auth_rejections = Counter(
            "fastmode_auth_rejections", "Requests refused by auth: 401 bad key, 403 tier not "
            "allowed, 429 over a key's limit", ["status", "tier"], registry=r,
        )
        self.rejections = Counter(
            "fastmode_rejections", "Requests refused before any work, by reason",
            ["reason", "tier"], registry=r,
        )
        r.register(_ReplicaCollector(replicas))
        # collectors that write their own text (``render() -> bytes``), after the registry's:
        # many fixed series, which prometheus_client's exposition made too slow to scrape
        # on the event loop (``gateway.observe.vllm_metrics``)
        self.rendered: list[Rendered] = []

    def exposition(self) -> bytes:
        """``/metrics``: the registry's text (``generate_latest``), then the rendered ones'."""
        return generate_latest(self.registry) + b"".join(r.render() for r in self.rendered)

    def record(
        self,
        tier: str,
        status: int,
        prompt: int = 0,
        cached: int = 0,
        output: int = 0,
        cost: float = 0.0,
        ttft: float | None = None,
        itl: float | None = None,
    ) -> None:
        s = self.tiers.stats(tier)
        requests = s.requests
        if status in requests:
            requests[status] += 1
        else:
            requests[status] = 1
            s.since[status] = time.time()
        s.prompt += prompt
        s.cached += cached
        s.output += output
        s.cost += cost
        if ttft is not None:
            s.ttft.observe(ttft)
        if itl is not None:
            s.itl.observe(itl)


class _Gauge:
    """One gauge read from a callable at scrape time (nothing on the hot path)."""

    def __init__(self, name: str, doc: str, read: Callable[[], float]) -> None:
        self.name, self.doc, self.read = name, doc, read

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.name, self.doc, value=self.read())


def add_gauge(metrics: Metrics, name: str, doc: str, read: Callable[[], float]) -> None:
    metrics.registry.register(_Gauge(name, doc, read))


class _ReplicaCollector:
    """Reads every replica's scheduler when Prometheus scrapes."""

    def __init__(self, replicas: Callable[[], Iterable[tuple[str, str, Scheduler]]]) -> None:
        self._replicas = replicas

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["deployment", "replica"]
        batch = GaugeMetricFamily(
            "fastmode_replica_batch", "Sequences in the batch (background included)", labels=labels
        )
        users = GaugeMetricFamily(
            "fastmode_replica_running", "Our own sequences in the batch", labels=labels
        )
        waiting = GaugeMetricFamily(
            "fastmode_replica_waiting", "Sequences in the waiting queue", labels=labels
        )
        others = GaugeMetricFamily(
            "fastmode_replica_waiting_others",
            "The other tenants' requests in the waiting queue (modeled)", labels=labels
        )
        kv = GaugeMetricFamily(
            "fastmode_replica_kv_used_ratio", "Share of KV-cache capacity in use", labels=labels
        )
        # prefix cache (backends.prefix_cache): hit rate = hit_tokens / query_tokens
        cached = GaugeMetricFamily(
            "fastmode_prefix_cache_tokens", "KV tokens held by the prefix cache", labels=labels
        )
        queries = CounterMetricFamily(
            "fastmode_prefix_cache_query_tokens", "Prompt tokens looked up in the prefix cache",
            labels=labels,
        )
        hits = CounterMetricFamily(
            "fastmode_prefix_cache_hit_tokens", "Prompt tokens found in the prefix cache "
            "(their prefill skipped)", labels=labels,
        )
        evicted = CounterMetricFamily(
            "fastmode_prefix_cache_evicted_tokens", "Prefix-cache KV tokens evicted (memory "
            "pressure or expiry)", labels=labels,
        )
        for dep, name, sched in self._replicas():
            lab = [dep, name]
            users.add_metric(lab, sched.running)
            batch.add_metric(lab, sched.running + sched.background.seqs)
            waiting.add_metric(lab, len(sched.waiting))
            others.add_metric(lab, sched.queued_elsewhere)
            kv.add_metric(lab, sched.kv_used_tokens / sched.kv_capacity)
            if sched.cache is not None:
                st = sched.cache.stats
                cached.add_metric(lab, sched.cache.size)
                queries.add_metric(lab, st.query_tokens)
                hits.add_metric(lab, st.hit_tokens)
                evicted.add_metric(lab, st.evicted_tokens)
        yield batch
        yield users
        yield waiting
        yield others
        yield kv
        yield from (cached, queries, hits, evicted)
