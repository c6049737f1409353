"""What ``simulate`` measures: per-tier latencies and costs, per-replica occupancy, ITL.

A ``Collector`` is the virtual driver's set of callbacks and accumulates raw figures while the
run goes on (arrays of floats, counters, histograms: no per-request objects are kept); then
``summarise`` turns them into the per-tier figures ``fastmode simulate`` prints.

Inter-token latency comes from the steps themselves: every decode token produced in a step of
duration dt waited dt for it, so a histogram of step durations weighted by decode tokens is the
ITL distribution across all tokens. Steady stretches report their first and last durations and
grow linearly between them, so a stretch is added as a range, not step by step.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from fastmode.backends.engine import EngineSpec
from fastmode.backends.histogram import LogHistogram
from fastmode.backends.scheduler import Sequence

if TYPE_CHECKING:
    from fastmode.backends.drivers import Arrival, VirtualDriver


class RequestTag(NamedTuple):
    """What a simulated request carries through the engine: its tier and its user (-1: open)."""

    tier: str
    user: int
    reasoning: int = 0  # output tokens of thinking before the first visible one


@dataclass
class TierStats:
    requests: int = 0
    completed: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    ttft: array[float] = field(default_factory=lambda: array("d"))
    e2e: array[float] = field(default_factory=lambda: array("d"))
    ttft_visible: array[float] = field(default_factory=lambda: array("d"))  # after reasoning
    reasoning_tokens: int = 0
    user_tps: array[float] = field(default_factory=lambda: array("d"))
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose prefill the prefix cache skipped
    output_tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class ReplicaStats:
    deployment: str
    busy_s: float = 0.0
    batch_s: float = 0.0  # integral of the batch (background included) over busy time
    steps: int = 0


@dataclass
class Collector:
    """Callbacks for ``VirtualDriver``; accumulates everything ``summarise`` needs."""

    spec: EngineSpec
    tiers: dict[str, TierStats] = field(default_factory=dict)
    replicas: dict[str, ReplicaStats] = field(default_factory=dict)
    itl: dict[str, LogHistogram] = field(default_factory=dict)  # per deployment
    driver: Any = None
    seat_s: dict[str, float] = field(default_factory=dict)  # per deployment: our requests'
    # batch slots x seconds, admission to finish (a fleet's pools report their mean batch)

    def attach(self, driver: VirtualDriver) -> None:
        self.driver = driver  # a fleet adds replicas during the run (``_replica``)
        for replica in driver.replicas:
            self.replicas[replica.name] = ReplicaStats(replica.deployment)
            self.itl.setdefault(replica.deployment, LogHistogram())

    def stats(self, tier: str) -> TierStats:
        s = self.tiers.get(tier)
        if s is None:
            s = self.tiers[tier] = TierStats()
        return s

    def arrived(self, tier: str) -> None:
        self.stats(tier).requests += 1

    def on_step(
        self, name: str, dt0: float, tokens: int, batch: int, steps: int, dt1: float
    ) -> None:
        r = self.replicas.get(name) or self._replica(name)
        span = steps * (dt0 + dt1) / 2  # durations grow linearly within a stretch
        r.busy_s += span
        r.batch_s += batch * span
        r.steps += steps
        if tokens:
            h = self.itl[r.deployment]
            if steps == 1 or dt0 == dt1:
                h.add(dt0, tokens)
            else:
                h.add_range(dt0, dt1, tokens)

    def _replica(self, name: str) -> ReplicaStats:
        """A replica the fleet brought into service during the run."""
        deployment = self.driver.all_replicas[name].deployment
        self.itl.setdefault(deployment, LogHistogram())
        r = self.replicas[name] = ReplicaStats(deployment)
        return r

    def on_finish(self, seq: Sequence) -> None:
        tag: RequestTag = seq.tag
        s = self.stats(tag.tier)
        s.completed += 1
        s.ttft.append(seq.first_token_at - seq.arrival)
        s.e2e.append(seq.finished_at - seq.arrival)
        ttft = seq.first_token_at - seq.arrival
        if tag.reasoning and seq.output_tokens > 1:
            # the first visible token is token number `reasoning`: that many of this
            # request's inter-token latencies after its first token
            itl = (seq.finished_at - seq.first_token_at) / (seq.output_tokens - 1)
            ttft += min(tag.reasoning, seq.output_tokens - 1) * itl
        s.ttft_visible.append(ttft)
        s.reasoning_tokens += tag.reasoning
        if seq.output_tokens > 1 and seq.finished_at > seq.first_token_at:
            s.user_tps.append((seq.output_tokens - 1) / (seq.finished_at - seq.first_token_at))
        s.prompt_tokens += seq.prompt_tokens
        s.cached_tokens += seq.cached_tokens
        dep = self.spec.tiers[tag.tier].deployment.name
        self.seat_s[dep] = self.seat_s.get(dep, 0.0) + seq.finished_at - seq.admitted_at
        s.output_tokens += seq.output_tokens
        s.cost_usd += self.spec.tiers[tag.tier].prices.cost(
            seq.prompt_tokens, seq.cached_tokens, seq.output_tokens
        )

    def on_reject(self, arrival: Arrival, reason: str) -> None:
        tag: RequestTag = arrival.tag
        self.stats(tag.tier).rejected[reason] += 1


def _pcts(values: array[float] | list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    s = sorted(values)
    n = len(s)

    def q(p: float) -> float:
        return s[min(n - 1, max(0, math.ceil(p * n) - 1))]

    return {"p50": q(0.50), "p90": q(0.90), "p99": q(0.99)}


def _hist_pcts(h: LogHistogram) -> dict[str, float | None]:
    if not h.total:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    return {
        "p50": h.quantile(0.50),
        "p90": h.quantile(0.90),
        "p99": h.quantile(0.99),
        "mean": h.mean,
    }


@dataclass(frozen=True)
class SimResult:
    tiers: dict[str, dict[str, Any]]  # per tier: the figures ``fastmode simulate`` prints
    run: dict[str, Any]  # wall time, simulated time, steps, steps/s, totals
    fleet: dict[str, Any] | None = None  # nodes, pools, the other tenants, revenue and cost

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (its shape is what ``fastmode bench --compare-sim`` reads)."""
        doc: dict[str, Any] = {"tiers": self.tiers, "run": self.run}
        if self.fleet is not None:
            doc["fleet"] = self.fleet
        return doc


def tier_figures(spec: EngineSpec, col: Collector, name: str, span: float) -> dict[str, Any]:
    """The figures of one tier over a run of ``span`` simulated seconds."""
    s = col.stats(name)
    tier = spec.tiers[name]
    dep = tier.deployment
    reps = [r for r in col.replicas.values() if r.deployment == dep.name]
    bg = dep.background.seqs
    if span > 0 and reps:
        occ = sum((r.batch_s + bg * max(0.0, span - r.busy_s)) / span for r in reps)
        mean_batch = occ / len(reps)
    else:
        mean_batch = float(bg)
    tps = _pcts(s.user_tps)
    return {
        "deployment": dep.name,
        "model": tier.model,
        "requests": s.requests,
        "completed": s.completed,
        "rejected": sum(s.rejected.values()),
        "rejected_by_reason": dict(sorted(s.rejected.items())),
        "ttft_s": _pcts(s.ttft),
        "ttft_visible_s": _pcts(s.ttft_visible),  # equal to ttft_s without reasoning
        "reasoning_tokens": s.reasoning_tokens,
        "itl_s": _hist_pcts(col.itl.get(dep.name, LogHistogram())),
        "e2e_s": _pcts(s.e2e),
        "output_tokens_per_s_per_user_p50": tps["p50"],
        "output_tokens_per_s": s.output_tokens / span if span > 0 else 0.0,
        "mean_batch": mean_batch,
        "max_batch": dep.limits.max_batch,
        "background_seqs": bg,
        "prompt_tokens": s.prompt_tokens,
        "cached_prompt_tokens": s.cached_tokens,
        "prefix_cache_hit_rate": s.cached_tokens / s.prompt_tokens if s.prompt_tokens else None,
        "output_tokens": s.output_tokens,
        "cost_usd": s.cost_usd,
    }
