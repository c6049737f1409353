"""Workloads in virtual time: generate requests, run them through the engine, aggregate metrics.

Pure (no printing, no clock except to report the wall time it took): ``fastmode simulate`` and
``bench/sim_hour.py`` both call ``simulate`` and format its ``SimResult``.

- Open loop (``rate``): requests arrive at a given rate, Poisson or evenly spaced, whatever the
  engine does with them; generated lazily, so an hour of traffic costs no memory up front.
- Closed loop (``concurrency``): C users, each sending its next request the moment its previous
  one finishes (a refused user tries again after ``retry_after_s``); arrivals are fed back into
  the running driver (``VirtualDriver.push``).

What the requests are (tier mix, lengths, arrival order) comes from the shared ``workload``
package, the same definition ``fastmode bench`` draws from, so one seed gives both the same
requests. Metrics are collected by ``simstats``.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fastmode.backends.drivers import Arrival, VirtualDriver
from fastmode.backends.engine import EngineSpec, Tier
from fastmode.backends.fleetstats import fleet_figures
from fastmode.backends.prefix_workload import PromptPrefixes
from fastmode.backends.scheduler import Sequence
from fastmode.backends.simstats import Collector, RequestTag, SimResult, tier_figures
from fastmode.workload import (
    DIST_KINDS,
    LOGNORMAL_SIGMA,
    DistKind,
    LengthDist,
    RequestShape,
    ShapeSampler,
    WorkloadError,
    check_arrivals,
    user_rng,
)

__all__ = [
    "DIST_KINDS",
    "LOGNORMAL_SIGMA",
    "DistKind",
    "LengthDist",
    "SimResult",
    "Workload",
    "WorkloadError",
    "simulate",
    "summarise",
]


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
    shared_prefix_tokens: int = 0  # a system prompt every request starts with (prefix caching)
    turns: int = 1  # closed loop: each user's requests are turns of conversations this long
    reasoning_effort: str | None = None  # each reply thinks first, as its tier's model does

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
        check_arrivals(self.arrivals)
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
        if self.shared_prefix_tokens < 0:
            raise WorkloadError(f"shared-prefix-tokens: must be >= 0, got "
                                f"{self.shared_prefix_tokens}")
        if self.turns < 1 or (self.turns > 1 and self.concurrency is None):
            raise WorkloadError("turns: must be >= 1, and conversations need --concurrency")


# ---------------------------------------------------------------------------------------------
# Workload generation
# ---------------------------------------------------------------------------------------------


class _Arrivals:
    """Turns the workload's request shapes into ``Arrival``s on the tiers' deployments."""

    def __init__(self, wl: Workload, spec: EngineSpec) -> None:
        self.shapes = ShapeSampler(wl.mix, wl.prompt, wl.output)
        self.tiers: dict[str, Tier] = {n: spec.tiers[n] for n in self.shapes.tiers}
        self.prefixes = PromptPrefixes(wl.shared_prefix_tokens, wl.turns)
        self.effort = wl.reasoning_effort
        self.seed = wl.seed

    def arrival(self, t: float, user: int, shape: RequestShape) -> tuple[Arrival, bool]:
        """An arrival at ``t``, and whether it fits its model's context window."""
        tier = self.tiers[shape.tier]
        p, o = shape.prompt_tokens, shape.output_tokens
        thought = 0
        if self.effort is not None:  # a draw of its own per request (the same in any order)
            rng = random.Random(f"{self.seed}/{user}/{t!r}")
            thought = tier.behavior.reasoning.draw(self.effort, rng)
            o += thought
        key = None
        if self.prefixes.active:
            p, key = self.prefixes.request(user, tier.model, p, o, tier.context_window)
        arr = Arrival(t, tier.deployment.name, p, o, tag=RequestTag(tier.name, user, thought),
                      prefix=key, priority=tier.priority)
        return arr, p + o <= tier.context_window


def _open_loop(wl: Workload, arrivals: _Arrivals, col: Collector) -> Iterator[Arrival]:
    assert wl.rate is not None
    timed = arrivals.shapes.timed(wl.rate, wl.arrivals, random.Random(wl.seed))
    limit = wl.requests if wl.requests is not None else math.inf
    n = 0
    while n < limit:
        t, shape = next(timed)
        if t > wl.duration:
            return
        n += 1
        arr, ok = arrivals.arrival(t, -1, shape)
        col.arrived(shape.tier)
        if ok:
            yield arr
        else:
            col.on_reject(arr, "context_window")


class _ClosedLoop:
    """C users; each one's next request arrives when its previous one finishes.

    Each user draws from its own random stream (``workload.user_rng``), so that user u's k-th
    request is the same whatever order the engine's callbacks come in.
    """

    def __init__(
        self, wl: Workload, arrivals: _Arrivals, col: Collector, driver: VirtualDriver
    ) -> None:
        self.wl, self.arrivals, self.col, self.driver = wl, arrivals, col, driver
        self.issued = 0
        self.limit = wl.requests if wl.requests is not None else math.inf
        self.rngs = [user_rng(wl.seed, user) for user in range(wl.concurrency or 0)]

    def start(self) -> None:
        for user in range(len(self.rngs)):
            self.issue(user, 0.0)

    def issue(self, user: int, t: float) -> None:
        while t <= self.wl.duration and self.issued < self.limit:
            self.issued += 1
            shape = self.arrivals.shapes.draw(self.rngs[user])
            arr, ok = self.arrivals.arrival(t, user, shape)
            self.col.arrived(shape.tier)
            if ok:
                self.driver.push(arr)
                return
            self.col.on_reject(arr, "context_window")
            t += self.wl.retry_after_s

    def on_finish(self, seq: Sequence) -> None:
        self.col.on_finish(seq)
        tag: RequestTag = seq.tag
        self.issue(tag.user, seq.finished_at)

    def on_reject(self, arrival: Arrival, reason: str) -> None:
        self.col.on_reject(arrival, reason)
        tag: RequestTag = arrival.tag
        self.arrivals.prefixes.forget(tag.user)
        self.issue(tag.user, arrival.time + self.wl.retry_after_s)


# ---------------------------------------------------------------------------------------------
# Running and summarising
# ---------------------------------------------------------------------------------------------


def simulate(
    spec: EngineSpec, wl: Workload, steady: bool = True, fleet_mode: str | None = None
) -> SimResult:
    """Run ``wl`` on the engine ``spec`` in virtual time and summarise it.

    The config's fleet moves replicas and the other tenants' load (their arrivals drawn with
    the workload's seed); ``fleet_mode`` ``fixed`` / ``elastic`` overrides its node bounds.
    """
    wl.validate(spec)
    arrivals = _Arrivals(wl, spec)
    col = Collector(spec)
    fleet = spec.fleet.variant(fleet_mode, wl.seed) if spec.fleet is not None else None
    wall0 = time.perf_counter()
    if wl.rate is not None:
        driver = VirtualDriver(
            spec.deployments, col.on_step, col.on_finish, col.on_reject, steady=steady,
            fleet=fleet,
        )
        col.attach(driver)
        end = driver.run(_open_loop(wl, arrivals, col))
    else:
        driver = VirtualDriver(spec.deployments, col.on_step, steady=steady, fleet=fleet)
        loop = _ClosedLoop(wl, arrivals, col, driver)
        driver.on_finish = loop.on_finish
        driver.on_reject = loop.on_reject
        col.attach(driver)
        loop.start()
        end = driver.run((), feedback=True)
    wall = time.perf_counter() - wall0
    result = summarise(spec, wl, col, end, wall, driver.steps)
    figures = fleet_figures(spec, driver, end, result.tiers, col.seat_s)
    return SimResult(result.tiers, result.run, figures) if figures is not None else result


def summarise(
    spec: EngineSpec, wl: Workload, col: Collector, end: float, wall: float, steps: int
) -> SimResult:
    """Per-tier figures (tiers with a share above zero, in mix order) and run totals."""
    span = end
    tiers = {
        name: tier_figures(spec, col, name, span) for name in wl.mix if wl.mix[name] > 0
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
        "prefix_cache_hit_rate": _hit_rate(tiers.values()),
        "mode": "open" if wl.rate is not None else "closed",
        "rate": wl.rate,
        "concurrency": wl.concurrency,
        "duration_s": wl.duration,
        "seed": wl.seed,
    }
    return SimResult(tiers, run)


def _hit_rate(tiers: Iterable[dict[str, Any]]) -> float | None:
    """Share of prompt tokens served from the prefix cache, over the tiers given."""
    prompt = sum(t["prompt_tokens"] for t in tiers)
    return None if not prompt else sum(t["cached_prompt_tokens"] for t in tiers) / prompt
