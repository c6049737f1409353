"""How well the performance model predicts published measurements.

Evaluates every figure of the public calibration set (fastmode/backends/data/measurements/published.toml)
with the shipped hardware profiles (the in-sample error: the fitted parameters saw these
figures) and by leave-one-source-out cross-validation (each source predicted by a fit that
never saw it: the error to expect on measurements the model was not fitted to). Prints, per
source, per metric and per hardware, the median and worst absolute error, the worst
cross-validated figures, then the totals. Targets (median cross-validated error <= 8%
overall and <= 15% on TTFT, no figure refused) are reported, not asserted.

    python bench/calibration.py            # the error tables
    python bench/calibration.py --figures  # and every figure, predicted vs measured (* marks
                                           # the scored-not-fitted ones, calibrate/scope.py)
    python bench/calibration.py --write    # refit and write the fitted values into
                                           # fastmode/backends/data/hardware.toml and engines.toml
    python bench/calibration.py --json     # one JSON object
    python bench/calibration.py --jobs 2   # the folds in two processes (same results)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from fastmode.backends.calibrate import (
    ErrorStats,
    Figure,
    Result,
    apply_fits,
    cross_validate,
    engine_priors,
    error_stats,
    evaluate,
    fit,
    group_stats,
    is_fitted,
    load_engines,
    load_published,
    prior_catalog,
    write_engines,
    write_fits,
)
from fastmode.backends.profiles import Catalog

DATA = Path(__file__).resolve().parent.parent / "fastmode" / "backends" / "data"
HARDWARE_TOML = DATA / "hardware.toml"
ENGINES_TOML = DATA / "engines.toml"
TARGET_CV_MEDIAN = 0.08  # cross-validated median <= 8% overall...
TARGET_CV_TTFT = 0.15  # ...and <= 15% on the time to the first token
FIT_NOTE = "fitted (bench/calibration.py --write)"


def pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"


def table(title: str, groups: dict[str, ErrorStats], cv: dict[str, ErrorStats]) -> list[str]:
    width = max(len(k) for k in groups) if groups else 10
    out = [title, f"  {'':{width}}  {'n':>3}  {'median':>7}  {'worst':>7}   "
           f"{'cv median':>9}  {'cv worst':>8}"]
    for k, s in groups.items():
        c = cv[k]
        refused = f"  ({s.refused} refused)" if s.refused else ""
        out.append(f"  {k:{width}}  {s.n:>3}  {pct(s.median_abs):>7}  {pct(s.worst_abs):>7}   "
                   f"{pct(c.median_abs):>9}  {pct(c.worst_abs):>8}{refused}")
    return out


def as_dict(s: ErrorStats) -> dict[str, object]:
    return {"n": s.n, "refused": s.refused, "median_abs": s.median_abs,
            "worst_abs": s.worst_abs, "worst_id": s.worst_id}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", action="store_true", help="print every figure")
    ap.add_argument("--write", action="store_true",
                    help="refit from the priors and write the values into hardware.toml")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--jobs", type=int, default=1,
                    help="cross-validation folds run in this many processes (default 1)")
    args = ap.parse_args()

    sources, figures = load_published()
    catalog = Catalog.builtin()
    engines = load_engines()
    t0 = time.perf_counter()
    if args.write:
        base = prior_catalog(catalog)
        gpus = [n for n, h in base.hardware.items() if h.kind == "gpu"]
        names = set(gpus) | {f.hardware for f in figures}
        fits = fit(figures, base, hardware=names, engines=engine_priors(engines))
        write_fits(HARDWARE_TOML, fits, FIT_NOTE)
        write_engines(ENGINES_TOML, fits.engines, FIT_NOTE)
        catalog = apply_fits(base, fits)
        engines = fits.engines
        print(f"wrote the fitted values of {', '.join(sorted(fits.hardware))} into "
              f"{HARDWARE_TOML} and of the engines {', '.join(sorted(fits.engines))} into "
              f"{ENGINES_TOML}")
    insample: list[Result] = evaluate(figures, catalog, engines)
    cv = cross_validate(figures, catalog, engines=engines, jobs=args.jobs).results
    wall = time.perf_counter() - t0

    def by_source(f: Figure) -> str:
        return f.source

    def by_metric(f: Figure) -> str:
        return f.metric

    def by_hardware(f: Figure) -> str:
        return f.hardware

    total, total_cv = error_stats(insample), error_stats(cv)
    if args.json:
        doc = {
            "figures": len(figures), "sources": len(sources),
            "in_sample": as_dict(total), "cross_validated": as_dict(total_cv),
            "per_source": {k: {"in_sample": as_dict(v),
                               "cross_validated": as_dict(group_stats(cv, by_source)[k])}
                           for k, v in group_stats(insample, by_source).items()},
            "per_metric": {k: {"in_sample": as_dict(v),
                               "cross_validated": as_dict(group_stats(cv, by_metric)[k])}
                           for k, v in group_stats(insample, by_metric).items()},
            "rows": [{"id": r.figure.id, "measured": r.figure.value, "unit": r.figure.unit,
                      "predicted": r.predicted, "cv_predicted": c.predicted,
                      "fitted": is_fitted(r.figure, catalog)}
                     for r, c in zip(insample, cv, strict=True)],
            "wall_s": wall,
        }
        print(json.dumps(doc, indent=2, allow_nan=True))
        return 0

    scored = sum(1 for f in figures if not is_fitted(f, catalog))
    print(f"{len(figures)} published figures from {len(sources)} sources "
          f"(fastmode/backends/data/measurements/published.toml); {scored} scored, not fitted "
          f"(fastmode/backends/calibrate/scope.py), counted in every table\n")
    for title, key in (("per source", by_source), ("per metric", by_metric),
                       ("per hardware", by_hardware)):
        print("\n".join(table(title, group_stats(insample, key), group_stats(cv, key))))
        print()
    if args.figures:
        print(f"  {'measured':>10}  {'predicted':>10}  {'error':>7}  {'cv error':>8}  figure "
              "(* scored, not fitted)")
        for r, c in zip(insample, cv, strict=True):
            e = "refused" if r.error is None else pct(r.error)
            ce = "refused" if c.error is None else pct(c.error)
            pred = "-" if r.predicted is None else f"{r.predicted:.4g}"
            mark = "" if is_fitted(r.figure, catalog) else " *"
            print(f"  {r.figure.value:>10.4g}  {pred:>10}  {e:>7}  {ce:>8}  {r.figure.id}{mark}")
        print()
    print("worst cross-validated figures")
    worst = sorted((r for r in cv if r.error is not None), key=lambda r: -abs(r.error or 0))
    for r in worst[:12]:
        print(f"  {pct(r.error or 0.0):>7}  {r.figure.id}")
    print()
    print(f"in-sample:        median {pct(total.median_abs)}, worst {pct(total.worst_abs)} "
          f"({total.worst_id}), refused {total.refused}")
    print(f"cross-validated:  median {pct(total_cv.median_abs)}, worst "
          f"{pct(total_cv.worst_abs)} ({total_cv.worst_id}), refused {total_cv.refused}")
    ttft = group_stats(cv, by_metric).get("ttft")
    ttft_cv = ttft.median_abs if ttft is not None else math.nan
    verdict = "met" if total_cv.median_abs <= TARGET_CV_MEDIAN else "NOT met"
    verdict_ttft = "met" if ttft_cv <= TARGET_CV_TTFT else "NOT met"
    print(f"target median cross-validated error <= {pct(TARGET_CV_MEDIAN)}: {verdict}; "
          f"TTFT <= {pct(TARGET_CV_TTFT)} ({pct(ttft_cv)}): {verdict_ttft}; wall {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
