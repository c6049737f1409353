"""Scored, not fitted (fastmode/backends/calibrate/scope.py).

A figure measured in a regime the model does not model (an MoE run with thousands of sequences
queued) is predicted and counted in the error tables, but the least-squares fit does not learn
from it: adding one, however far off, leaves every fitted value where it was.
"""

from __future__ import annotations

import dataclasses

import pytest

from fastmode.backends.calibrate import (
    MOE_OFFLINE_QUEUE,
    Figure,
    apply_fits,
    cross_validate,
    error_stats,
    evaluate,
    fit,
    is_fitted,
    predict_figure,
    prior_catalog,
    scored_only_reason,
)
from fastmode.backends.profiles import Catalog

CAT = Catalog.builtin()
BASE = prior_catalog(CAT)


def figure(i: int, *, model: str = "llama-3.1-8b", batch: int = 8, metric: str = "itl",
           scenario: str = "serving", source: str = "s") -> Figure:
    unit = {"itl": "s", "throughput": "tok/s"}[metric]
    return Figure(id=f"f{i}", source=source, model=model, hardware="h200", chips=1,
                  precision="fp8", scenario=scenario, batch=batch, prompt_tokens=1024,
                  output_tokens=1024, metric=metric, value=1.0, unit=unit, max_batch=4096)


def made_by_model(f: Figure, catalog: Catalog, factor: float = 1.0) -> Figure:
    """``f`` with the value the model predicts on ``catalog``, times ``factor``."""
    value = predict_figure(f, catalog)
    assert value is not None
    return dataclasses.replace(f, value=value * factor)


def test_the_rule_is_about_conditions_moe_with_thousands_queued():
    moe = figure(0, model="qwen3-30b-a3b", batch=MOE_OFFLINE_QUEUE, metric="throughput")
    assert scored_only_reason(moe, CAT).startswith("moe-offline")
    assert not is_fitted(moe, CAT)
    # fewer queued, a dense model, or a static batch: fitted
    assert is_fitted(dataclasses.replace(moe, batch=MOE_OFFLINE_QUEUE - 1), CAT)
    assert is_fitted(dataclasses.replace(moe, model="llama-3.1-8b"), CAT)
    assert is_fitted(dataclasses.replace(moe, scenario="static"), CAT)


def test_a_scored_not_fitted_figure_does_not_move_the_fit_but_is_in_the_errors():
    # figures of a slower H200 (lower bandwidth efficiency than its prior), made by the model
    h200 = BASE.get_hardware("h200")
    slow = Catalog({**BASE.hardware, "h200": dataclasses.replace(h200, mbu=0.5)}, BASE.models)
    fitted_figs = [made_by_model(dataclasses.replace(figure(i, batch=b), source=f"s{i}"), slow)
                   for i, b in enumerate((1, 16, 64))]
    # an MoE offline run the model gets a factor 3 wrong
    moe = dataclasses.replace(
        figure(9, model="qwen3-30b-a3b", batch=3 * MOE_OFFLINE_QUEUE, metric="throughput"),
        source="moe")
    moe = made_by_model(moe, slow, factor=3.0)
    assert not is_fitted(moe, BASE)

    without = fit(fitted_figs, BASE, hardware={"h200"}, sweeps=2)
    with_it = fit([*fitted_figs, moe], BASE, hardware={"h200"}, sweeps=2)
    mine = without.hardware["h200"]
    assert mine.values != pytest.approx(mine.prior)  # the fit learnt from the others...
    assert with_it.hardware["h200"].values == pytest.approx(without.hardware["h200"].values)
    assert with_it.hardware["h200"].figures == without.hardware["h200"].figures

    # ...and the MoE figure is still predicted and counted, in-sample and cross-validated
    insample = evaluate([*fitted_figs, moe], apply_fits(BASE, with_it))
    assert moe.id in {r.figure.id for r in insample}
    assert error_stats(insample).n == len(fitted_figs) + 1
    cv = cross_validate([*fitted_figs, moe], CAT, sweeps=1).results
    scored = next(r for r in cv if r.figure.id == moe.id)
    assert scored.error is not None and scored.error < -0.5  # the factor 3 shows
    assert error_stats(cv).worst_id == moe.id
