"""Which figures the fit learns from: the "scored, not fitted" rule.

Some published figures were measured in a regime the performance model does not model. They
are still predicted and counted in every error table (in-sample and cross-validated), so the
reported error stays honest, but they do not enter the least-squares fit: a regime the model
lacks a term for would otherwise pull the shared parameters (an engine's step overhead, the
MoE kernel terms) away from the figures the model does describe, and make those worse.

The rule is stated in terms of a figure's conditions, never its error:

- **MoE offline throughput**: a mixture-of-experts model in a serving (closed-loop or
  offline) run with at least ``MOE_OFFLINE_QUEUE`` sequences queued at once. At thousands of
  queued sequences every expert is busy, the batch is split over attention data-parallel ranks
  and expert-parallel all-to-alls, and the engine's MoE kernels switch to grouped-GEMM paths
  whose efficiency the model has no term for (docs/calibration.md, "Scored, not fitted").
  What such a run's structure costs is modelled (an offline run of one length is waves of the
  batch, ``perf_serving.waves_throughput``, and the batch is the one trtllm-bench picks);
  what is left is no single term (docs/calibration.md, "Offline runs are waves"), so the rule
  stays.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastmode.backends.calibrate.figures import Figure
from fastmode.backends.profiles import Catalog

MOE_OFFLINE_QUEUE = 1000  # sequences queued at once from which an MoE run is out of scope


def scored_only_reason(fig: Figure, catalog: Catalog) -> str:
    """Why ``fig`` is scored but not fitted ("" when the fit learns from it)."""
    if (fig.scenario == "serving" and fig.batch >= MOE_OFFLINE_QUEUE
            and catalog.get_model(fig.model).is_moe):
        return f"moe-offline: MoE model, {fig.batch} sequences queued (>= {MOE_OFFLINE_QUEUE})"
    return ""


def is_fitted(fig: Figure, catalog: Catalog) -> bool:
    """True if the least-squares fit learns from ``fig`` (it is scored either way)."""
    return not scored_only_reason(fig, catalog)


def fitted_figures(figures: Iterable[Figure], catalog: Catalog) -> list[Figure]:
    """The figures the fit learns from, in their order."""
    return [f for f in figures if is_fitted(f, catalog)]


__all__ = ["MOE_OFFLINE_QUEUE", "fitted_figures", "is_fitted", "scored_only_reason"]
