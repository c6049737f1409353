"""Built-in scenarios. ``fast-share``: what does fast mode do to everyone else?

The sweep runs the same load (same total rate, lengths and duration) once per fast share
(0%, 10%, 25%, 50% by default): the fast tier takes that share of the requests and the other
tiers of ``--mix`` share the rest in their given proportions (standard alone by default;
``workload.sweep``, the definition ``fastmode simulate --scenario fast-share`` uses too).

Each point of the JSON document has the simulator's shape: ``{"fast_share", "mix", "tiers":
{tier: figures}, "fleet": {...} | null, "bench": the whole bench summary}``, where a tier's
figures carry the same keys as ``fastmode simulate --json`` (``ttft_s``, ``itl_s``, ``e2e_s``
percentiles, ``output_tokens_per_s_per_user_p50``, ``rejected``...), measured here. ``fleet``
comes from the server's public ``/dashboard/state`` (a fastmode server; other servers have none)
read before and after the point: replicas per pool, node-hours, the provider's cost and revenue
over the point. A live fleet's autoscaler reacts in tens of seconds: points of a few seconds
see the pools as they are, points of several minutes see them move.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import httpx
from rich.table import Table

from fastmode.clients.load_config import LoadConfig, LoadError
from fastmode.clients.report import fmt_ms, fmt_num, fmt_usd
from fastmode.clients.stats import Price, summarise
from fastmode.clients.worker_processes import execute
from fastmode.clients.workload import FlagWorkload
from fastmode.workload.sweep import DEFAULT_SHARES, parse_shares, sweep_mix, sweep_row

SCENARIOS = ("fast-share",)
SWEEP_RATE = 10.0  # req/s when the flags give no load
__all__ = ["DEFAULT_SHARES", "SCENARIOS", "SWEEP_RATE", "parse_shares", "run_fast_share",
           "sweep_mix", "sweep_table"]


def _pct(summary: dict[str, Any] | None) -> dict[str, Any]:
    s = summary or {}
    return {k: s.get(k) for k in ("p50", "p90", "p99", "mean")}


def tier_figures(group: dict[str, Any]) -> dict[str, Any]:
    """A bench summary group in the shape of ``fastmode simulate --json``'s tier figures."""
    cost = group.get("cost_usd") or {}
    return {
        "requests": group["requests"],
        "completed": group["ok"],
        "rejected": group["errors"],
        "rejected_by_reason": group["errors_by_kind"],
        "ttft_s": _pct(group["ttft_s"]),
        "itl_s": _pct(group["itl_s"]),
        "e2e_s": _pct(group["e2e_s"]),
        "output_tokens_per_s_per_user_p50": (group["user_tokens_per_s"] or {}).get("p50"),
        "output_tokens_per_s": group["output_tokens_per_s"],
        "prompt_tokens": group["prompt_tokens"],
        "output_tokens": group["output_tokens"],
        "cost_usd": cost.get("total"),
    }


def server_state(url: str, timeout: float = 5.0) -> dict[str, Any] | None:
    """The server's ``/dashboard/state`` (fastmode), or None (another server, or none)."""
    try:
        r = httpx.get(url.rstrip("/") + "/dashboard/state", timeout=timeout)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        doc = r.json()
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("fleet"), dict) else None


def fleet_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the fleet did between two states: the ``fleet`` object of a sweep point."""
    if before is None or after is None:
        return None
    b, a = before["fleet"], after["fleet"]
    pools = {}
    for name, p in a["pools"].items():
        start = b["pools"].get(name, p)["active"]
        pools[name] = {"replicas_start": start, "replicas_end": p["active"],
                       "replicas_mean": (start + p["active"]) / 2, "pending": p["pending"]}
    users = a["revenue_usd"]["users"] - b["revenue_usd"]["users"]
    tenants = a["revenue_usd"]["tenants"] - b["revenue_usd"]["tenants"]
    cost = a["provider_cost_usd"] - b["provider_cost_usd"]
    return {
        "policy": a["policy"],
        "pools": pools,
        "nodes": {n: {"paid": g["paid"], "count": g["count"], "max_count": g["max_count"]}
                  for n, g in a["nodes"].items()},
        "node_hours": a["node_hours"] - b["node_hours"],
        "cost_usd": cost,
        "revenue_usd": {"users": users, "tenants": tenants, "total": users + tenants},
        "margin_usd": users + tenants - cost,
    }


def run_fast_share(
    cfg: LoadConfig,
    wl: FlagWorkload,
    shares: Sequence[float] = DEFAULT_SHARES,
    *,
    slo_ttft: float | None = None,
    slo_tpot: float | None = None,
    prices: dict[str, Price] | None = None,
    workers: int = 1,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run every sweep point; returns (table rows, the points of the JSON document)."""
    rows, points = [], []
    for share in shares:
        point_wl = dataclasses.replace(wl, mix=sweep_mix(wl.mix, share))
        missing = set(point_wl.mix) - set(cfg.routes)
        if missing:
            raise LoadError(f"--scenario fast-share: no route for tier {sorted(missing)[0]!r}")
        before = server_state(cfg.url)
        rr = execute(cfg, point_wl, workers, label=f"fast {100 * share:g}%")
        after = server_state(cfg.url)
        summary = summarise(
            rr.results, warmup=cfg.warmup, cooldown=cfg.cooldown, send_end=rr.send_end,
            slo_ttft=slo_ttft, slo_tpot=slo_tpot, prices=prices,
        )
        point = {
            "fast_share": share,
            "mix": point_wl.mix,
            "tiers": {t: tier_figures(g) for t, g in summary["tiers"].items()},
            "fleet": fleet_delta(before, after),
            "bench": {"generator": rr.generator().as_dict(), **summary},
        }
        row = sweep_row(point)
        overall = summary["overall"]
        row.update(errors=overall["errors"], goodput_share=overall["goodput"]["share"],
                   cost_per_request_usd=overall["cost_usd"]["per_request"])
        rows.append(row)
        points.append(point)
    return rows, points


def _replicas(row: dict[str, Any]) -> str:
    return " / ".join(f"{n} {v:g}" for n, v in row["replicas"].items() if v is not None) or "-"


def sweep_table(rows: list[dict[str, Any]]) -> Table:
    """The same columns as ``fastmode simulate --scenario fast-share``."""
    t = Table(title="What does fast mode do to everyone else? (same total rate per point)",
              title_justify="left")
    for col in ("fast share", "std TTFT p50 ms", "std TTFT p99 ms", "std tok/s/user",
                "fast TTFT p50 ms", "fast TTFT p99 ms", "fast tok/s/user", "rejected",
                "replicas (mean)", "node-h", "revenue", "cost"):
        t.add_column(col, justify="right", no_wrap=col == "replicas (mean)")
    for r in rows:
        t.add_row(
            f"{100 * r['fast_share']:g}%", fmt_ms(r["standard_ttft_p50_s"]),
            fmt_ms(r["standard_ttft_p99_s"]), fmt_num(r["standard_user_tps_p50"]),
            fmt_ms(r["fast_ttft_p50_s"]), fmt_ms(r["fast_ttft_p99_s"]),
            fmt_num(r["fast_user_tps_p50"]), str(r["rejected"]), _replicas(r),
            fmt_num(r["node_hours"], 3), fmt_usd(r["revenue_usd"]),
            fmt_usd(r["provider_cost_usd"]),
        )
    return t
