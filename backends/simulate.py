"""Workloads in virtual time: generate requests, run them through the engine, aggregate metrics.

Pure (no printing, no clock except to report the wall time it took): ``fastmode simulate`` and
``bench/sim_hour.py`` both call ``simulate`` and format its ``SimResult``.

- Open loop (``rate``): requests arrive at a given rate, Poisson or evenly spaced, whatever the
  engine does with them; generated lazily, so an hour of traffic costs no memory up front.
- Closed loop (``concurrency``): C users, each sending its next request the moment its previous
  one finishes (a refused user tries again after ``retry_after_s``); arrivals are fed back into
  the running driver (``VirtualDriver.push``).

Latencies: TTFT and end-to-end come from each finished sequence. Inter-token latency comes from
the steps themselves: every decode token produced in a step of duration dt waited dt for it, so a
histogram of step durations weighted by decode tokens is the ITL distribution across all tokens.
"""

from __future__ import annotations

import math
import random
import time
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from .drivers import Arrival, VirtualDriver
from .engine import EngineSpec, Tier
from .histogram import LogHistogram
from .scheduler import Sequence

DistKind = Literal["fixed", "uniform", "lognormal"]
DIST_KINDS: tuple[str, ...] = ("fixed", "uniform", "lognormal")
LOGNORMAL_SIGMA = 0.8  # spread of lognormal lengths (ln-space sd): p99 is ~6x the median


class WorkloadError(ValueError):
    """A workload parameter is invalid; the message names it."""


@dataclass(frozen=True)
class LengthDist:
    """Token counts with a given mean: fixed, uniform on [mean/2, 3·mean/2], or lognormal."""

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
        if self.kind == "fixed":
            return self.mean
        if self.kind == "uniform":
            lo = max(1, self.mean // 2)
            return rng.randint(lo, max(lo, 2 * self.mean - lo))
        mu = math.log(self.mean) - LOGNORMAL_SIGMA**2 / 2
        return max(1, round(rng.lognormvariate(mu, LOGNORMAL_SIGMA)))


@dataclass(frozen=True)
class Workload:
    mix: dict[str, float]  # tier -> share of requests (normalised on use)
    prompt: LengthDist
    output: LengthDist
    rate: float | None = None  # open loop: requests per second
    concurrency: int | None = None  # closed loop: users
    duration: float = 60.0  # seconds during which requests are sent (then drain)
    requests: int | None = None  # stop sending after this many
    arrivals: str = "poisson"  # open loop: "poisson" | "constant"
    seed: int = 1
    retry_after_s: float = 1.0  # closed loop: a refused user's pause before the next request

    def validate(self, spec: EngineSpec) -> None:
        if (self.rate is None) == (self.concurrency is None):
            raise WorkloadError("rate/concurrency: give exactly one")
        if self.rate is not None and not self.rate > 0:
            raise WorkloadError(f"rate: must be > 0, got {self.rate}")
        if self.concurrency is not None and self.concurrency <= 0:
            raise WorkloadError(f"concurrency: must be > 0, got {self.concurrency}")
        if not self.duration > 0:
            raise WorkloadError(f"duration: must be > 0, got {self.duration}")
        if self.requests is not None and self.requests <= 0:
            raise WorkloadError(f"requests: must be > 0, got {self.requests}")
        if math.isinf(self.duration) and self.requests is None:
            raise WorkloadError("duration: infinite needs a --requests bound")
        if self.arrivals not in ("poisson", "constant"):
            raise WorkloadError(
                f"arrivals: unknown {self.arrivals!r}; allowed: poisson, constant"
            )
        if not self.mix:
            raise WorkloadError("mix: empty")
        for name, share in self.mix.items():
            if name not in spec.tiers:
                raise WorkloadError(
                    f"mix: unknown tier {name!r}; allowed: {', '.join(sorted(spec.tiers))}"
                )
            if share < 0:
                raise WorkloadError(f"mix: share of {name!r} must be >= 0, got {share}")
        if sum(self.mix.values()) <= 0:
            raise WorkloadError("mix: the shares add up to 0")


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


@dataclass
class TierStats:
    requests: int = 0
    completed: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    ttft: array = field(default_factory=lambda: array("d"))
    e2e: array = field(default_factory=lambda: array("d"))
    user_tps: array = field(default_factory=lambda: array("d"))
    prompt_tokens: int = 0
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

    def attach(self, driver: VirtualDriver) -> None:
        for name in driver.names.values():
            dep = name.rsplit("-", 1)[0]
            self.replicas[name] = ReplicaStats(dep)
            self.itl.setdefault(dep, LogHistogram())

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
        r = self.replicas[name]
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

    def on_finish(self, seq: Sequence) -> None:
        tier_name = seq.tag[0]
        s = self.stats(tier_name)
        s.completed += 1
        s.ttft.append(seq.first_token_at - seq.arrival)
        s.e2e.append(seq.finished_at - seq.arrival)
        if seq.output_tokens > 1 and seq.finished_at > seq.first_token_at:
            s.user_tps.append((seq.output_tokens - 1) / (seq.finished_at - seq.first_token_at))
        s.prompt_tokens += seq.prompt_tokens
        s.output_tokens += seq.output_tokens
        s.cost_usd += self.spec.tiers[tier_name].prices.cost(
            seq.prompt_tokens, 0, seq.output_tokens
        )

    def on_reject(self, arrival: Arrival, reason: str) -> None:
        self.stats(arrival.tag[0]).rejected[reason] += 1


# ---------------------------------------------------------------------------------------------
# Workload generation
# ---------------------------------------------------------------------------------------------


class _Sampler:
    """Draws one request at a time: tier, then prompt and output lengths (in that order)."""

    def __init__(self, wl: Workload, spec: EngineSpec, rng: random.Random) -> None:
        self.rng = rng
        self.wl = wl
        names = [n for n, w in wl.mix.items() if w > 0]
        total = sum(wl.mix[n] for n in names)
        acc, self.cum = 0.0, []
        for n in names:
            acc += wl.mix[n] / total
            self.cum.append(acc)
        self.tiers: list[Tier] = [spec.tiers[n] for n in names]

    def draw(
        self, t: float, user: int, rng: random.Random | None = None
    ) -> tuple[Arrival, bool]:
        """An arrival at ``t``, and whether it fits its model's context window."""
        rng = rng or self.rng
        u = rng.random()
        i = 0
        while i < len(self.cum) - 1 and u >= self.cum[i]:
            i += 1
        tier = self.tiers[i]
        p = self.wl.prompt.sample(rng)
        o = self.wl.output.sample(rng)
        arr = Arrival(t, tier.deployment.name, p, o, tag=(tier.name, user))
        return arr, p + o <= tier.context_window


def _open_loop(
    wl: Workload, sampler: _Sampler, col: Collector
) -> Iterator[Arrival]:
    assert wl.rate is not None
    rng = sampler.rng
    limit = wl.requests if wl.requests is not None else math.inf
    n = 0
    t = 0.0
    while n < limit:
        if wl.arrivals == "poisson":
            t += rng.expovariate(wl.rate)
        else:
            t = n / wl.rate
        if t > wl.duration:
            return
        n += 1
        arr, ok = sampler.draw(t, -1)
        col.arrived(arr.tag[0])
        if ok:
            yield arr
        else:
            col.on_reject(arr, "context_window")


class _ClosedLoop:
    """C users; each one's next request arrives when its previous one finishes.

    Each user draws from its own random stream, so that user u's k-th request is the same
    whatever order the engine's callbacks come in.
    """

    def __init__(
        self, wl: Workload, sampler: _Sampler, col: Collector, driver: VirtualDriver
    ) -> None:
        self.wl, self.sampler, self.col, self.driver = wl, sampler, col, driver
        self.issued = 0
        self.limit = wl.requests if wl.requests is not None else math.inf
        n = wl.concurrency or 0
        self.rngs = [random.Random(f"{wl.seed}:{user}") for user in range(n)]

    def start(self) -> None:
        assert self.wl.concurrency is not None
        for user in range(self.wl.concurrency):
            self.issue(user, 0.0)

    def issue(self, user: int, t: float) -> None:
        while t <= self.wl.duration and self.issued < self.limit:
            self.issued += 1
            arr, ok = self.sampler.draw(t, user, self.rngs[user])
            self.col.arrived(arr.tag[0])
            if ok:
                self.driver.push(arr)
                return
            self.col.on_reject(arr, "context_window")
            t += self.wl.retry_after_s

    def on_finish(self, seq: Sequence) -> None:
        self.col.on_finish(seq)
        self.issue(seq.tag[1], seq.finished_at)

    def on_reject(self, arrival: Arrival, reason: str) -> None:
        self.col.on_reject(arrival, reason)
        self.issue(arrival.tag[1], arrival.time + self.wl.retry_after_s)


# ---------------------------------------------------------------------------------------------
# Running and summarising
# ---------------------------------------------------------------------------------------------


def _pcts(values: array | list[float]) -> dict[str, float | None]:
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

    def to_dict(self) -> dict[str, Any]:
        return {"tiers": self.tiers, "run": self.run}


def simulate(spec: EngineSpec, wl: Workload, steady: bool = True) -> SimResult:
    """Run ``wl`` on the engine ``spec`` in virtual time and summarise it."""
    wl.validate(spec)
    rng = random.Random(wl.seed)
    sampler = _Sampler(wl, spec, rng)
    col = Collector(spec)
    wall0 = time.perf_counter()
    if wl.rate is not None:
        driver = VirtualDriver(
            spec.deployments, col.on_step, col.on_finish, col.on_reject, steady=steady
        )
        col.attach(driver)
        end = driver.run(_open_loop(wl, sampler, col))
    else:
        driver = VirtualDriver(spec.deployments, col.on_step, steady=steady)
        loop = _ClosedLoop(wl, sampler, col, driver)
        driver.on_finish = loop.on_finish
        driver.on_reject = loop.on_reject
        col.attach(driver)
        loop.start()
        end = driver.run((), feedback=True)
    wall = time.perf_counter() - wall0
    return summarise(spec, wl, col, end, wall, driver.steps)


def summarise(
    spec: EngineSpec, wl: Workload, col: Collector, end: float, wall: float, steps: int
) -> SimResult:
    span = end
    tiers: dict[str, dict[str, Any]] = {}
    for name in wl.mix:
        if wl.mix[name] <= 0:
            continue
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
        tiers[name] = {
            "deployment": dep.name,
            "model": tier.model,
            "requests": s.requests,
            "completed": s.completed,
            "rejected": sum(s.rejected.values()),
            "rejected_by_reason": dict(sorted(s.rejected.items())),
            "ttft_s": _pcts(s.ttft),
            "itl_s": _hist_pcts(col.itl.get(dep.name, LogHistogram())),
            "e2e_s": _pcts(s.e2e),
            "output_tokens_per_s_per_user_p50": tps["p50"],
            "output_tokens_per_s": s.output_tokens / span if span > 0 else 0.0,
            "mean_batch": mean_batch,
            "max_batch": dep.limits.max_batch,
            "background_seqs": bg,
            "prompt_tokens": s.prompt_tokens,
            "output_tokens": s.output_tokens,
            "cost_usd": s.cost_usd,
        }
    run = {
        "wall_s": wall,
        "simulated_s": span,
        "steps": steps,
        "steps_per_s": steps / wall if wall > 0 else None,
        "requests": sum(t["requests"] for t in tiers.values()),
        "completed": sum(t["completed"] for t in tiers.values()),
        "rejected": sum(t["rejected"] for t in tiers.values()),
        "cost_usd": sum(t["cost_usd"] for t in tiers.values()),
        "mode": "open" if wl.rate is not None else "closed",
        "rate": wl.rate,
        "concurrency": wl.concurrency,
        "duration_s": wl.duration,
        "seed": wl.seed,
    }
    return SimResult(tiers, run)
