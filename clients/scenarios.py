"""Built-in scenarios. ``fast-share``: what does fast mode do to everyone else?

The sweep runs the same load (same total rate, lengths and duration) once per fast share
(0%, 10%, 25%, 50% by default): the fast tier takes that share of the requests and the other
tiers of ``--mix`` share the rest in their given proportions (standard alone by default). Each
point reports the standard tier's p50/p99 TTFT and tokens/s, the fast tier's, and the total cost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rich.table import Table

from .load_config import LoadConfig, LoadError
from .report import fmt_ms, fmt_num, fmt_pct, fmt_usd
from .stats import Price, summarise
from .worker_processes import execute
from .workload import FlagWorkload

SCENARIOS = ("fast-share",)
DEFAULT_SHARES = (0.0, 0.10, 0.25, 0.50)
FAST = "fast"


def sweep_mix(base: dict[str, float], share: float) -> dict[str, float]:
    """The fast tier at ``share``; the other tiers of ``base`` keep their proportions."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"--shares: each share must be in [0, 100]%, got {100 * share:g}%")
    rest = {k: v for k, v in base.items() if k != FAST and v > 0} or {"standard": 1.0}
    total = sum(rest.values())
    mix = {k: v / total * (1.0 - share) for k, v in rest.items() if share < 1.0}
    if share > 0:
        mix[FAST] = share
    return mix


def parse_shares(text: str) -> tuple[float, ...]:
    """``0,10,25,50`` (percent) -> fractions."""
    try:
        shares = tuple(float(p) / 100 for p in text.split(",") if p.strip())
    except ValueError:
        raise ValueError(f"--shares: expected percentages like 0,10,25,50, got {text!r}") from None
    if not shares:
        raise ValueError("--shares: empty")
    for s in shares:
        sweep_mix({}, s)
    return shares


def _get(summary: dict[str, Any], tier: str, *path: str) -> float | None:
    obj: Any = summary["tiers"].get(tier)
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj if isinstance(obj, int | float) else None


def point_row(share: float, summary: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"fast_share": share}
    for tier in ("standard", FAST):
        row[f"{tier}_requests"] = _get(summary, tier, "requests")
        row[f"{tier}_ttft_p50_s"] = _get(summary, tier, "ttft_s", "p50")
        row[f"{tier}_ttft_p99_s"] = _get(summary, tier, "ttft_s", "p99")
        row[f"{tier}_user_tps_p50"] = _get(summary, tier, "user_tokens_per_s", "p50")
        row[f"{tier}_output_tps"] = _get(summary, tier, "output_tokens_per_s")
    overall = summary["overall"]
    row["errors"] = overall["errors"]
    row["goodput_share"] = overall["goodput"]["share"]
    row["cost_usd"] = overall["cost_usd"]["total"]
    row["cost_per_request_usd"] = overall["cost_usd"]["per_request"]
    return row


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
    """Run every sweep point; returns (rows, the full summary of each point)."""
    rows, points = [], []
    for share in shares:
        point_wl = dataclasses.replace(wl, mix=sweep_mix(wl.mix, share))
        missing = set(point_wl.mix) - set(cfg.routes)
        if missing:
            raise LoadError(f"--scenario fast-share: no route for tier {sorted(missing)[0]!r}")
        rr = execute(cfg, point_wl, workers, label=f"fast {100 * share:g}%")
        summary = summarise(
            rr.results, warmup=cfg.warmup, cooldown=cfg.cooldown, send_end=rr.send_end,
            slo_ttft=slo_ttft, slo_tpot=slo_tpot, prices=prices,
        )
        rows.append(point_row(share, summary))
        points.append({"fast_share": share, "mix": point_wl.mix,
                       "generator": rr.generator().as_dict(), **summary})
    return rows, points


def sweep_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="What does fast mode do to everyone else? (same total rate per point)",
              title_justify="left")
    for col in ("fast share", "std TTFT p50 ms", "std TTFT p99 ms", "std tok/s/user",
                "std tok/s", "fast TTFT p50 ms", "fast TTFT p99 ms", "fast tok/s/user",
                "fast tok/s", "errors", "goodput", "total cost", "cost/request"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            f"{100 * r['fast_share']:g}%", fmt_ms(r["standard_ttft_p50_s"]),
            fmt_ms(r["standard_ttft_p99_s"]), fmt_num(r["standard_user_tps_p50"]),
            fmt_num(r["standard_output_tps"]), fmt_ms(r["fast_ttft_p50_s"]),
            fmt_ms(r["fast_ttft_p99_s"]), fmt_num(r["fast_user_tps_p50"]),
            fmt_num(r["fast_output_tps"]), str(r["errors"]), fmt_pct(r["goodput_share"]),
            fmt_usd(r["cost_usd"]), fmt_usd(r["cost_per_request_usd"]),
        )
    return t

