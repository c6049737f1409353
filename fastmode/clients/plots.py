"""PNG plots of a bench run (matplotlib, Agg backend): readable at a glance, units on every axis.

- ``ttft_cdf.png`` and ``itl_cdf.png``: cumulative distributions per tier;
- ``user_tokens_per_s.png``: each user's decode speed, per tier (box plot with the points);
- ``latency_over_time.png``: TTFT and end-to-end latency per request over the run, and the
  aggregate output tokens/s per second;
- ``fast_share.png`` (``--scenario fast-share``): the sweep's figures against the fast share.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastmode.clients.records import RequestResult
from fastmode.clients.stats import chunk_itls, request_user_tps, tier_order

TIER_COLOURS = {"standard": "#1f77b4", "fast": "#d62728", "spark": "#2ca02c"}
_EXTRA = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _plt() -> Any:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def colour(tier: str, order: Sequence[str]) -> str:
    if tier in TIER_COLOURS:
        return TIER_COLOURS[tier]
    others = [t for t in order if t not in TIER_COLOURS]
    return _EXTRA[others.index(tier) % len(_EXTRA)] if tier in others else "#333333"


def _by_tier(results: Sequence[RequestResult]) -> dict[str, list[RequestResult]]:
    out: dict[str, list[RequestResult]] = defaultdict(list)
    for r in results:
        out[r.tier].append(r)
    return {t: out[t] for t in tier_order(out)}


def _cdf(ax: Any, values: list[float], label: str, col: str) -> None:
    s = sorted(values)
    n = len(s)
    ax.step([v * 1000 for v in s], [(i + 1) / n for i in range(n)], where="post",
            label=f"{label} (n={n:,})", color=col)


def _log_if_wide(ax: Any, values: list[float], axis: str = "x") -> None:
    pos = [v for v in values if v > 0]
    if pos and max(pos) / min(pos) > 12:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def write_plots(results: Sequence[RequestResult], outdir: str | Path, title: str) -> list[Path]:
    """Write the run's PNGs into ``outdir``; returns their paths."""
    plt = _plt()
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    tiers = _by_tier([r for r in results if r.ok])
    order = list(tiers)
    paths: list[Path] = []

    for name, label, getter in (
        ("ttft_cdf.png", "Time to first token", lambda rs: [r.ttft for r in rs if r.ttft is not None]),
        ("itl_cdf.png", "Inter-token latency",
         lambda rs: [x for r in rs for x in chunk_itls(r.chunk_times, r.chunk_tokens)]),
    ):
        fig, ax = plt.subplots(figsize=(8, 5))
        every: list[float] = []
        for tier, rs in tiers.items():
            vals = getter(rs)
            if vals:
                _cdf(ax, vals, tier, colour(tier, order))
                every += [v * 1000 for v in vals]
        _log_if_wide(ax, every)
        ax.set_title(f"{label} per tier — CDF\n{title}")
        ax.set_xlabel(f"{label.lower()} (ms)")
        ax.set_ylabel("share of " + ("requests" if "first" in label else "tokens"))
        ax.set_ylim(0, 1.01)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)

    fig, ax = plt.subplots(figsize=(8, 5))
    data = [[v for v in map(request_user_tps, rs) if v is not None] for rs in tiers.values()]
    if any(data):
        ax.boxplot(data, showfliers=False)
        ax.set_xticks(range(1, len(order) + 1), order)
        for i, (tier, vals) in enumerate(zip(order, data, strict=True), start=1):
            jitter = [i + 0.25 * (((k * 0.618) % 1) - 0.5) for k in range(len(vals))]
            ax.scatter(jitter, vals, s=8, alpha=0.4, color=colour(tier, order))
        _log_if_wide(ax, [v for d in data for v in d], "y")
    ax.set_title(f"Output tokens per second, per user\n{title}")
    ax.set_xlabel("tier")
    ax.set_ylabel("tokens/s per user (after the first token)")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "user_tokens_per_s.png", dpi=110)
    plt.close(fig)
    paths.append(out / "user_tokens_per_s.png")

    paths.append(_over_time(plt, results, tiers, order, out, title))
    return paths


def _over_time(plt: Any, results: Sequence[RequestResult], tiers: dict[str, list[RequestResult]],
               order: list[str], out: Path, title: str) -> Path:
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    ttfts: list[float] = []
    for tier, rs in tiers.items():
        col = colour(tier, order)
        pts = [(r.start, r.ttft * 1000) for r in rs if r.ttft is not None]
        ttfts += [p[1] for p in pts]
        ax1.scatter([p[0] for p in pts], [p[1] for p in pts], s=6, color=col, label=tier)
        e2e = [(r.start, r.end) for r in rs if r.end is not None]
        ax2.scatter([p[0] for p in e2e], [p[1] for p in e2e], s=6, color=col, label=tier)
    _log_if_wide(ax1, ttfts, "y")
    ax1.set_ylabel("TTFT (ms)")
    ax1.set_title(f"Latency over the run\n{title}")
    ax2.set_ylabel("end-to-end latency (s)")
    errs = [r.start for r in results if not r.ok]
    if errs:
        ax2.scatter(errs, [0] * len(errs), marker="x", color="black", label="error")
    bins: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        for t, n in zip(r.chunk_times, r.chunk_tokens, strict=True):
            bins[r.tier][math.floor(r.start + t)] += n
    for tier in tier_order(bins):
        secs = sorted(bins[tier])
        full = list(range(secs[0], secs[-1] + 1))
        ax3.plot([s + 0.5 for s in full], [bins[tier].get(s, 0) for s in full],
                 color=colour(tier, order), label=tier, drawstyle="steps-mid")
    ax3.set_ylabel("output tokens/s (1 s bins)")
    ax3.set_xlabel("time since the start of the run (s)")
    for ax in (ax1, ax2, ax3):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    path = out / "latency_over_time.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_fast_share(rows: list[dict[str, Any]], path: str | Path, title: str) -> Path:
    """The fast-share sweep: standard TTFT, per-user speeds and cost against the fast share."""
    plt = _plt()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    x = [100 * r["fast_share"] for r in rows]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4.5))

    def line(ax: Any, key: str, label: str, col: str, style: str = "-",
             scale: float = 1.0) -> None:
        pts = [(xi, r[key] * scale) for xi, r in zip(x, rows, strict=True) if r.get(key) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", color=col,
                    label=label)

    line(ax1, "standard_ttft_p50_s", "standard p50", TIER_COLOURS["standard"], scale=1000)
    line(ax1, "standard_ttft_p99_s", "standard p99", TIER_COLOURS["standard"], "--", 1000)
    line(ax1, "fast_ttft_p50_s", "fast p50", TIER_COLOURS["fast"], scale=1000)
    line(ax1, "fast_ttft_p99_s", "fast p99", TIER_COLOURS["fast"], "--", 1000)
    ax1.set_title("Time to first token")
    ax1.set_ylabel("TTFT (ms)")
    line(ax2, "standard_user_tps_p50", "standard", TIER_COLOURS["standard"])
    line(ax2, "fast_user_tps_p50", "fast", TIER_COLOURS["fast"])
    ax2.set_title("Output tokens/s per user (p50)")
    ax2.set_ylabel("tokens/s")
    line(ax3, "cost_usd", "total", "#444444")
    ax3.set_title("Total cost of the sweep point")
    ax3.set_ylabel("USD")
    for ax in (ax1, ax2, ax3):
        ax.set_xlabel("fast tier share of requests (%)")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
