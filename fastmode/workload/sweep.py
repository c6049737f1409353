"""The fast-share sweep, defined once for ``fastmode simulate`` and ``fastmode bench``.

The sweep runs the same load (total rate, lengths, duration) once per fast share: the fast tier
takes that share of the requests and the other tiers of the mix share the rest in their given
proportions (standard alone by default). The simulator and the bench both draw each point's
requests from this mix, so their points are the same experiment, measured two ways.
"""

from __future__ import annotations

from typing import Any

from fastmode.workload.errors import WorkloadError

DEFAULT_SHARES = (0.0, 0.10, 0.25, 0.50)
FAST = "fast"


def sweep_mix(base: dict[str, float], share: float, fast: str = FAST) -> dict[str, float]:
    """The fast tier at ``share``; the other tiers of ``base`` keep their proportions."""
    if not 0.0 <= share <= 1.0:
        raise WorkloadError(f"--shares: each share must be in [0, 100]%, got {100 * share:g}%")
    rest = {k: v for k, v in base.items() if k != fast and v > 0} or {"standard": 1.0}
    total = sum(rest.values())
    mix = {k: v / total * (1.0 - share) for k, v in rest.items() if share < 1.0}
    if share > 0:
        mix[fast] = share
    return mix


def parse_shares(text: str) -> tuple[float, ...]:
    """``0,10,25,50`` (percent) -> fractions, each in [0, 1], at most 20 points."""
    try:
        shares = tuple(float(p) / 100 for p in text.split(",") if p.strip())
    except ValueError:
        raise WorkloadError(
            f"--shares: expected percentages like 0,10,25,50, got {text!r}"
        ) from None
    if not shares:
        raise WorkloadError("--shares: empty")
    if len(shares) > 20:
        raise WorkloadError(f"--shares: at most 20 points, got {len(shares)}")
    for s in shares:
        sweep_mix({}, s)
    return shares


def _get(obj: object, *path: str) -> float | None:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj if isinstance(obj, int | float) and not isinstance(obj, bool) else None


def sweep_row(point: dict[str, Any]) -> dict[str, Any]:
    """The table row of one point of a sweep document (the shape ``fastmode simulate
    --scenario fast-share --json`` and ``fastmode bench --scenario fast-share`` share:
    ``{"fast_share", "tiers": {tier: figures}, "fleet": {...} | None}``)."""
    tiers = point.get("tiers") or {}
    fleet = point.get("fleet") or {}
    row: dict[str, Any] = {"fast_share": point["fast_share"]}
    for tier in ("standard", FAST):
        row[f"{tier}_requests"] = _get(tiers, tier, "requests")
        row[f"{tier}_ttft_p50_s"] = _get(tiers, tier, "ttft_s", "p50")
        row[f"{tier}_ttft_p99_s"] = _get(tiers, tier, "ttft_s", "p99")
        row[f"{tier}_user_tps_p50"] = _get(tiers, tier, "output_tokens_per_s_per_user_p50")
        row[f"{tier}_output_tps"] = _get(tiers, tier, "output_tokens_per_s")
    row["rejected"] = int(sum(_get(t, "rejected") or 0 for t in tiers.values()))
    row["cost_usd"] = sum(_get(t, "cost_usd") or 0.0 for t in tiers.values())  # users paid
    pools = fleet.get("pools") or {}
    row["replicas"] = {name: _get(p, "replicas_mean") for name, p in pools.items()}
    row["node_hours"] = _get(fleet, "node_hours")
    row["provider_cost_usd"] = _get(fleet, "cost_usd")
    row["revenue_usd"] = _get(fleet, "revenue_usd", "total")
    return row
