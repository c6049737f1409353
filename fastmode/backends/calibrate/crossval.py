"""Leave-one-source-out cross-validation of the two-stage fit."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from fastmode.backends.calibrate.engines import Engines, engine_priors
from fastmode.backends.calibrate.figures import Figure, Result, predict_figure
from fastmode.backends.calibrate.fit import Fit, apply_fits, fit, prior_catalog
from fastmode.backends.profiles import Catalog


@dataclass
class CrossValidation:
    results: list[Result]  # each figure predicted by the fit that did not see its source
    folds: dict[str, Fit] = field(default_factory=dict)


def _fold(task: tuple[str, list[Figure], Catalog, int, Engines]) -> tuple[str, Fit, list[Result]]:
    """One fold: fit both stages on every source but ``source``, predict its figures."""
    source, figures, base, sweeps, start = task
    held = [f for f in figures if f.source == source]
    train = [f for f in figures if f.source != source]
    fits = fit(train, base, hardware={f.hardware for f in held}, sweeps=sweeps, engines=start)
    cat = apply_fits(base, fits)
    return source, fits, [Result(f, predict_figure(f, cat, fits.engines)) for f in held]


def cross_validate(
    figures: Sequence[Figure], catalog: Catalog, sweeps: int = 8,
    engines: Engines | None = None, jobs: int = 1,
) -> CrossValidation:
    """Leave-one-source-out: for each source, fit on the others and predict its figures.

    Both stages start from the hand priors every time (not from the shipped fitted values),
    so a held-out source's figures never influence the parameters that predict them: a
    hardware that only the held-out source measured gets the pooled GPU values, an engine
    only it measured keeps its prior (``engine_priors``). ``jobs`` > 1 runs the folds in
    that many processes (the same results; bench/calibration.py --jobs).
    """
    base = prior_catalog(catalog)
    start = engine_priors(engines or {})
    by_source: dict[str, list[Figure]] = {}
    for f in figures:
        by_source.setdefault(f.source, []).append(f)
    tasks = [(source, list(figures), base, sweeps, start) for source in sorted(by_source)]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(_fold, tasks))
    else:
        done = [_fold(t) for t in tasks]
    results: list[Result] = []
    folds: dict[str, Fit] = {}
    for source, fits, res in done:
        folds[source] = fits
        results.extend(res)
    order = {f.id: i for i, f in enumerate(figures)}
    results.sort(key=lambda r: order[r.figure.id])
    return CrossValidation(results, folds)



__all__ = ["CrossValidation", "cross_validate"]
