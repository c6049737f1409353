"""The fast-share sweep in virtual time: what a growing fast share does to everyone else.

Each point runs the same workload (rate, lengths, duration, seed) with the fast tier taking a
share of the requests (``workload.sweep``), on the config's fleet: with a proportional policy the
autoscaler moves replicas to the fast pool as its demand grows, so on a fixed fleet they come
from the standard pool (its batches fill, its queue grows), and on an elastic one the fleet
rents nodes instead (node-hours rise). The other tenants' demand is the same at every point and
so are their arrivals (same seed): the points differ by the share alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from fastmode.backends.engine import EngineSpec
from fastmode.backends.simulate import Workload, simulate
from fastmode.workload.sweep import DEFAULT_SHARES, FAST, sweep_mix


def fast_share_sweep(
    spec: EngineSpec, base: Workload, shares: Sequence[float] = DEFAULT_SHARES,
    fleet_mode: str | None = None, fast: str = FAST,
) -> dict[str, Any]:
    """``{"scenario", "fleet_mode", "workload", "points": [{"fast_share", "mix", "tiers",
    "fleet", "run"}]}``; ``tiers`` holds ``simulate``'s per-tier figures."""
    if fast not in spec.tiers:
        raise ValueError(f"--scenario fast-share: the config has no tier {fast!r}")
    points = []
    for share in shares:
        wl = dataclasses.replace(base, mix=sweep_mix(base.mix, share, fast))
        result = simulate(spec, wl, fleet_mode=fleet_mode)
        points.append({
            "fast_share": share,
            "mix": wl.mix,
            "tiers": result.tiers,
            "fleet": result.fleet,
            "run": result.run,
        })
    return {
        "scenario": "fast-share",
        "fleet_mode": fleet_mode or "config",
        "workload": {
            "rate": base.rate, "concurrency": base.concurrency, "duration_s": base.duration,
            "prompt": {"kind": base.prompt.kind, "mean": base.prompt.mean},
            "output": {"kind": base.output.kind, "mean": base.output.mean},
            "seed": base.seed, "base_mix": base.mix,
        },
        "points": points,
    }
