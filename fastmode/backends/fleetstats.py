"""What a run did to the fleet: nodes and their cost, replicas per pool, the other tenants, and
the provider's revenue from everyone (``fastmode simulate --json``'s ``fleet`` object).

The fleet keeps its own books (``Fleet.report``: node-hours per group, replicas per pool, moves);
the other tenants keep theirs per replica (``TenantLoad.stats``: arrivals, admissions, refusals,
completions, tokens, time waited). This module adds them up per pool and prices the tenants'
tokens at their tier's prices, so a point of the fast-share sweep can say what the provider
earned and spent, not only what our users saw.
"""

from __future__ import annotations

from typing import Any

from fastmode.backends.drivers.base import Driver
from fastmode.backends.engine import EngineSpec
from fastmode.backends.tenants import (
    ADMITTED,
    ARRIVED,
    CACHED,
    COMPLETED,
    OUTPUT,
    PROMPT,
    REJECTED,
    WAIT,
)


def tenant_figures(spec: EngineSpec, replicas: Any, span: float) -> dict[str, dict[str, Any]]:
    """Per pool: the other tenants' requests, tokens, waits, revenue and mean batch slots held.

    ``replicas``: every replica the run had (``Driver.all_replicas.values()``)."""
    out: dict[str, dict[str, Any]] = {}
    seat_s: dict[str, float] = {}
    for r in replicas:
        t = r.tenants
        if t is None:
            continue
        pool = out.setdefault(r.deployment, {})
        seat_s[r.deployment] = seat_s.get(r.deployment, 0.0) + t.seat_s
        for cls, st in zip(t.demand.classes, t.stats, strict=True):
            acc = pool.setdefault(cls.tier, [0.0] * len(st))
            for k, v in enumerate(st):
                acc[k] += v
    figures: dict[str, dict[str, Any]] = {}
    for name, pool in out.items():
        tiers = {}
        for tier, st in pool.items():
            prices = spec.tiers[tier].prices
            tiers[tier] = {
                "arrived": int(st[ARRIVED]),
                "admitted": int(st[ADMITTED]),
                "rejected": int(st[REJECTED]),
                "completed": int(st[COMPLETED]),
                "wait_mean_s": st[WAIT] / st[ADMITTED] if st[ADMITTED] else None,
                "prompt_tokens": int(st[PROMPT]),
                "output_tokens": int(st[OUTPUT]),
                "revenue_usd": prices.cost(int(st[PROMPT]), int(st[CACHED]), int(st[OUTPUT])),
            }
        figures[name] = {
            "tiers": tiers,
            "seat_seconds": seat_s.get(name, 0.0),
            "mean_seats": seat_s.get(name, 0.0) / span if span > 0 else 0.0,
        }
    return figures


def fleet_figures(
    spec: EngineSpec, driver: Driver[Any], end: float, tiers: dict[str, dict[str, Any]],
    user_seat_s: dict[str, float] | None = None,
) -> dict[str, Any] | None:
    """The ``fleet`` object of a run on ``driver`` (None without a fleet): the fleet's books, the
    other tenants per pool, revenue (ours: the tiers' ``cost_usd``; theirs: their tokens at
    their tiers' prices), the provider's cost and the difference."""
    fleet = driver.fleet
    if fleet is None:
        return None
    for r in driver.all_replicas.values():
        if r.tenants is not None and not r.retired:
            r.tenants.advance(end)  # ticks run lazily: bring every replica's to the end
    report = fleet.report(end)
    tenants = tenant_figures(spec, driver.all_replicas.values(), end)
    for name, pool in report["pools"].items():
        t = tenants.get(name)
        pool["tenants"] = t["tiers"] if t else {}
        mean = pool["replicas_mean"]
        theirs = t["mean_seats"] / mean if t and mean > 0 else 0.0
        ours = (user_seat_s or {}).get(name, 0.0) / end / mean if end > 0 and mean > 0 else 0.0
        pool["tenant_seats_per_replica"] = theirs
        pool["mean_batch"] = theirs + ours  # per replica in service, tenants and ours
        if t:  # the tiers' figures: measured on the moving load, not its equilibrium
            for tier in tiers.values():
                if tier["deployment"] == name:
                    tier["background_seqs"] = round(theirs, 1)
                    tier["mean_batch"] = round(theirs + ours, 1)
    users = sum(t["cost_usd"] for t in tiers.values())
    theirs = sum(
        v["revenue_usd"] for pool in tenants.values() for v in pool["tiers"].values()
    )
    report["revenue_usd"] = {"users": users, "tenants": theirs, "total": users + theirs}
    report["margin_usd"] = users + theirs - report["cost_usd"]
    return report
