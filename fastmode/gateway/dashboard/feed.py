"""What the dashboard shows, sampled once per interval and shared by every page that watches.

One sampler per app: it runs only while at least one page is connected (the first subscriber
starts it, the last one leaving stops it), builds one snapshot per ``INTERVAL_S``, encodes it
once and hands the same bytes to every page's queue. Nothing in it runs per request or per
token; a sample reads the schedulers (O(replicas)), the per-tier Prometheus metrics (a handful
of series) and the fleet's books. A page that does not keep up loses intermediate samples (its
queue holds the latest one only), never slows the server.

A snapshot: per pool, each replica's seats (ours, the other tenants', free) and its queue at the
stop (ours and theirs), and the host lag its replicas slipped by over the last ``WINDOW_S``
seconds (``gateway.observe.host_lag``: time the machine, not the model, added to the streams); per tier,
output tokens/s, tokens/s per user and TTFT p50 over the window, its pool's host lag, requests
and dollars billed (and dollars per hour at the current rate);
the fleet: replicas per pool, moves under way, nodes paid, node-hours, the provider's cost and
revenue (ours and the other tenants').
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import orjson

from fastmode.backends.fleetstats import tenant_figures

INTERVAL_S = 0.5
WINDOW_S = 10.0
MAX_PAGES = 16  # dashboards connected at once; more get a 429


def _series(metric: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one Prometheus metric: (sample name, sorted labels) -> value."""
    out = {}
    for family in metric.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _by_tier(samples: dict[Any, float], name: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for (sname, labels), v in samples.items():
        if sname == name:
            tier = dict(labels).get("tier", "")
            totals[tier] = totals.get(tier, 0.0) + v
    return totals


def _buckets(samples: dict[Any, float], name: str) -> dict[str, list[tuple[float, float]]]:
    """Histogram buckets per tier: sorted (upper bound, cumulative count)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for (sname, labels), count in samples.items():
        if sname == name + "_bucket":
            lab = dict(labels)
            out.setdefault(lab.get("tier", ""), []).append((float(lab["le"]), count))
    for buckets in out.values():
        buckets.sort()
    return out


def _quantile(now: list[tuple[float, float]], old: list[tuple[float, float]] | None,
              q: float) -> float | None:
    """The ``q`` quantile of the observations between two bucket snapshots, interpolated
    linearly within its bucket (None without observations)."""
    before = dict(old or [])
    counts = [(le, c - before.get(le, 0.0)) for le, c in now]
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return None
    target = q * total
    lo_le, lo_c = 0.0, 0.0
    for le, c in counts:
        if c >= target:
            if math.isinf(le):
                return lo_le
            span = c - lo_c
            return lo_le + (le - lo_le) * ((target - lo_c) / span if span > 0 else 1.0)
        lo_le, lo_c = le, c
    return lo_le


class Dashboard:
    """The sampler and its subscribers (see the module doc)."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.pages: set[asyncio.Queue[bytes]] = set()
        self._task: asyncio.Task[None] | None = None
        self._history: deque[tuple[float, dict[str, Any]]] = deque()
        self.samples = 0  # snapshots built (while someone watched)

    # -- subscribers ----------------------------------------------------------------------

    def full(self) -> bool:
        return len(self.pages) >= MAX_PAGES

    async def feed(self) -> AsyncIterator[bytes]:
        """Server-sent events for one page: a ``state`` event per sample, until the client
        goes away or the server shuts down."""
        queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=1)
        self.pages.add(queue)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="fastmode-dashboard"
            )
        try:
            yield b": fastmode dashboard\n\n"
            while not self.gateway.draining:
                try:
                    frame = await asyncio.wait_for(queue.get(), timeout=5 * INTERVAL_S)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                yield frame
        finally:
            self.pages.discard(queue)

    async def _run(self) -> None:
        try:
            while self.pages and not self.gateway.draining:
                frame = b"event: state\ndata: " + orjson.dumps(self.snapshot()) + b"\n\n"
                for q in list(self.pages):
                    if q.full():  # a page that lags gets the latest sample, not a backlog
                        q.get_nowait()
                    q.put_nowait(frame)
                await asyncio.sleep(INTERVAL_S)
        finally:
            self._task = None

    # -- the snapshot ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        gw = self.gateway
        loop_now = asyncio.get_running_loop().time()
        engine = gw.fleet
        if engine is not None:
            engine.refresh(loop_now)  # idle replicas' tenants up to now
        self.samples += 1
        pools = self._pools(engine)
        tiers = self._tiers(pools)
        return {
            "time": time.time(),
            "uptime_s": time.time() - gw.started_at,
            "interval_s": INTERVAL_S,
            "window_s": WINDOW_S,
            "pools": pools,
            "tiers": tiers,
            "fleet": self._fleet(engine, loop_now, tiers),
        }

    def _pools(self, engine: Any) -> dict[str, Any]:
        gw = self.gateway
        draining = list(engine.driver.draining) if engine is not None else []
        pending = engine.fleet.snapshot()["pools"] if engine and engine.fleet else {}
        out = {}
        for name, dep in gw.deployments.items():
            tiers = [t.name for t in gw.spec.tiers.values() if t.deployment.name == name]
            reps = []
            for r in [*dep.replicas, *(d for d in draining if d.deployment == name)]:
                s = r.scheduler
                theirs = s.background.seqs
                reps.append({
                    "name": r.name,
                    "ours": s.running,
                    "tenants": theirs,
                    "free": max(0, s.limits.max_batch - s.running - theirs),
                    "waiting": len(s.waiting),
                    "tenants_waiting": r.tenants.queued if r.tenants is not None else 0,
                    "step_ms": gw.step_seconds(s) * 1e3,
                    "retired": r.retired,
                    "slips": r.slips,  # host lag, since the start (the window: the pool's)
                    "slipped_s": r.slipped,
                })
            out[name] = {
                "tiers": tiers,
                "model": dep.spec.placement.model.name,
                "hardware": dep.spec.placement.hardware.name,
                "max_batch": dep.spec.limits.max_batch,
                "replicas": reps,
                "pending": pending.get(name, {}).get("pending", 0),
            }
        return out

    def _tiers(self, pools: dict[str, Any]) -> dict[str, Any]:
        m = self.gateway.metrics
        now = time.monotonic()
        cur: dict[str, Any] = {
            "tokens": _by_tier(_series(m.output_tokens), "fastmode_output_tokens_total"),
            "cost": _by_tier(_series(m.cost), "fastmode_cost_usd_total"),
            "requests": _by_tier(_series(m.requests), "fastmode_requests_total"),
            "ttft": _buckets(_series(m.ttft), "fastmode_ttft_seconds"),
            "itl": _buckets(_series(m.itl), "fastmode_itl_seconds"),
            "lag": self._lag(),
        }
        hist = self._history  # (time, cur) samples over the window
        hist.append((now, cur))
        while len(hist) > 2 and now - hist[1][0] >= WINDOW_S:
            hist.popleft()
        then, old = hist[0]
        span = now - then
        for dep, pool in pools.items():  # host lag over the window, and since the start
            slips, lag = cur["lag"].get(dep, (0, 0.0))
            slips0, lag0 = old["lag"].get(dep, (0, 0.0))
            pool["host_lag_slips"] = slips - slips0
            pool["host_lag_s"] = lag - lag0
            pool["host_lag_total_s"] = lag
        out = {}
        for name, tier in self.gateway.spec.tiers.items():
            d_tok = cur["tokens"].get(name, 0.0) - old["tokens"].get(name, 0.0)
            d_cost = cur["cost"].get(name, 0.0) - old["cost"].get(name, 0.0)
            # a sequence gets one token per step of its replica: the pool's steps now, else
            # the requests' mean inter-token latencies over the window
            steps = [r["step_ms"] for r in pools[tier.deployment.name]["replicas"]
                     if r["ours"] and r["step_ms"] > 0]
            itl = sum(steps) / len(steps) / 1e3 if steps else None
            if itl is None and name in cur["itl"]:
                itl = _quantile(cur["itl"][name], old["itl"].get(name), 0.5)
            ttft = None
            if name in cur["ttft"]:
                ttft = _quantile(cur["ttft"][name], old["ttft"].get(name), 0.5)
            out[name] = {
                "deployment": tier.deployment.name,
                "model": tier.model,
                "price_output_per_mtok": tier.prices.output,
                "requests": int(cur["requests"].get(name, 0.0)),
                "output_tokens": int(cur["tokens"].get(name, 0.0)),
                "output_tokens_per_s": d_tok / span if span > 0 else None,
                "tokens_per_s_per_user_p50": 1.0 / itl if itl else None,
                "ttft_p50_s": ttft,
                "host_lag_s": pools[tier.deployment.name]["host_lag_s"],
                "cost_usd": cur["cost"].get(name, 0.0),
                "cost_usd_per_hour": d_cost / span * 3600 if span > 0 else None,
            }
        return out

    def _lag(self) -> dict[str, tuple[int, float]]:
        """Per deployment: slips and seconds slipped since the start, every replica it ever
        had (one the fleet moved away keeps its count)."""
        engine = self.gateway.fleet
        out: dict[str, tuple[int, float]] = {}
        if engine is not None:
            for r in engine.driver.all_replicas.values():
                slips, lag = out.get(r.deployment, (0, 0.0))
                out[r.deployment] = (slips + r.slips, lag + r.slipped)
        return out

    def _fleet(self, engine: Any, now: float, tiers: dict[str, Any]) -> dict[str, Any] | None:
        if engine is None or engine.fleet is None:
            return None
        fleet = engine.fleet
        snap = fleet.snapshot()
        books = fleet.report(now)
        span = max(now - fleet.start, 1e-9)
        theirs = tenant_figures(self.gateway.spec, engine.driver.all_replicas.values(), span)
        tenant_revenue = sum(
            v["revenue_usd"] for pool in theirs.values() for v in pool["tiers"].values()
        )
        return {
            "policy": snap["policy"],
            "pools": snap["pools"],
            "nodes": snap["nodes"],
            "node_hours": books["node_hours"],
            "provider_cost_usd": books["cost_usd"],
            "provider_cost_usd_per_hour": books["cost_usd"] / span * 3600,
            "revenue_usd": {
                "users": sum(t["cost_usd"] for t in tiers.values()),
                "tenants": tenant_revenue,
            },
        }
