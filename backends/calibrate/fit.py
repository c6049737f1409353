"""The fit: efficiency parameters per hardware by coordinate search, and cross-validation."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..profiles import Catalog, HardwareProfile
from .figures import CalibrationError, Figure, Result, predict_figure, predict_si


@dataclass(frozen=True)
class Param:
    """A fitted field of HardwareProfile: its range and how it is searched.

    The search runs over log(value + offset) (``offset`` > 0 lets a field reach 0);
    ``sigma`` is the width of the pull towards the prior in that coordinate.
    """

    name: str
    lo: float
    hi: float
    sigma: float
    offset: float = 0.0

    def to_x(self, v: float) -> float:
        return math.log(max(v, self.lo) + self.offset)

    def from_x(self, x: float) -> float:
        return min(self.hi, max(self.lo, math.exp(x) - self.offset))


PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("mbu", 0.3, 0.92, 0.25),
    Param("mbu_kv", 0.15, 0.92, 0.4),
    Param("mfu", 0.15, 0.95, 0.25),
    Param("mfu_fp8", 0.1, 0.95, 0.3),
    Param("step_overhead_ms", 0.02, 15.0, 1.0),
    Param("layer_latency_us", 0.5, 80.0, 0.7),
    Param("interconnect_latency_us", 0.5, 100.0, 0.7),
    Param("gemm_min_tokens", 1.0, 1024.0, 1.0),
    Param("roofline_overlap", 0.0, 1.0, 1.0, offset=0.1),
    Param("request_overhead_ms", 0.0, 200.0, 1.5, offset=2.0),
)}
# Engine-level behaviour, the same on every GPU: fitted once over all GPU figures, then fixed.
SHARED = ("gemm_min_tokens", "roofline_overlap", "request_overhead_ms")
# Efficiencies of one chip: fitted per hardware, pulled towards the pooled fit of all GPUs.
EFFICIENCIES = ("mbu", "mbu_kv", "mfu", "mfu_fp8", "step_overhead_ms")
# Properties of the chip and its interconnect: fitted per hardware, pulled to the hand prior.
CHIP = ("layer_latency_us", "interconnect_latency_us")
FIT_PARAMS: tuple[str, ...] = EFFICIENCIES + CHIP + SHARED

# The hand-set estimates every fit starts from and is pulled towards: the values of
# backends/data/hardware.toml before any fit (MBU/MFU inside the reference's published ranges,
# MBU 0.55-0.75 and MFU 0.35-0.65; overheads and latencies as documented there; the all-reduce
# latency is what its ring model gave for 8 chips, 2 x 7 x alpha). KV-read
# efficiency and fp8 GEMM efficiency start equal to mbu and mfu. Shared engine terms start at
# a 64-row GEMM tile, a plain max roofline (overlap 1) and 5 ms of request handling. Kept
# here (not read back from hardware.toml) so that a refit is reproducible.
_SHARED_PRIOR = {"gemm_min_tokens": 64.0, "roofline_overlap": 1.0, "request_overhead_ms": 5.0}
PRIORS: dict[str, dict[str, float]] = {
    "a100-40g": {"mbu": 0.65, "mbu_kv": 0.65, "mfu": 0.5, "mfu_fp8": 0.5,
                 "step_overhead_ms": 1.0, "layer_latency_us": 8.0,
                 "interconnect_latency_us": 35.0, **_SHARED_PRIOR},
    "a100-80g": {"mbu": 0.65, "mbu_kv": 0.65, "mfu": 0.5, "mfu_fp8": 0.5,
                 "step_overhead_ms": 1.0, "layer_latency_us": 8.0,
                 "interconnect_latency_us": 35.0, **_SHARED_PRIOR},
    "h100-sxm": {"mbu": 0.7, "mbu_kv": 0.7, "mfu": 0.5, "mfu_fp8": 0.5,
                 "step_overhead_ms": 1.0, "layer_latency_us": 6.0,
                 "interconnect_latency_us": 28.0, **_SHARED_PRIOR},
    "h200": {"mbu": 0.7, "mbu_kv": 0.7, "mfu": 0.5, "mfu_fp8": 0.5,
             "step_overhead_ms": 1.0, "layer_latency_us": 6.0,
             "interconnect_latency_us": 28.0, **_SHARED_PRIOR},
    "b200": {"mbu": 0.65, "mbu_kv": 0.65, "mfu": 0.45, "mfu_fp8": 0.45,
             "step_overhead_ms": 1.0, "layer_latency_us": 5.0,
             "interconnect_latency_us": 9.8, **_SHARED_PRIOR},
    "wse-3": {"mbu": 0.5, "mbu_kv": 0.5, "mfu": 0.3, "mfu_fp8": 0.3,
              "step_overhead_ms": 0.1, "layer_latency_us": 20.0,
              "interconnect_latency_us": 15.0, **_SHARED_PRIOR},
}
# The generic GPU estimate the pooled fit starts from (the reference's mid-range values).
GPU_PRIOR = {"mbu": 0.7, "mbu_kv": 0.7, "mfu": 0.5, "mfu_fp8": 0.5, "step_overhead_ms": 1.0,
             **_SHARED_PRIOR}
PRIOR_WEIGHT = 0.02  # a parameter one sigma from its prior costs as much as ~2 figures 10% off


def prior_of(hw: HardwareProfile) -> dict[str, float]:
    """The hand-set starting point of a profile: PRIORS, or the profile's own values."""
    if hw.name in PRIORS:
        return dict(PRIORS[hw.name])
    return {name: float(getattr(hw, name) if getattr(hw, name) is not None else
                        (hw.mbu if name == "mbu_kv" else hw.mfu))
            for name in FIT_PARAMS}


def with_params(hw: HardwareProfile, values: Mapping[str, float]) -> HardwareProfile:
    unknown = set(values) - set(PARAMS)
    if unknown:
        raise CalibrationError(f"not a fitted parameter: {sorted(unknown)}")
    changes: dict[str, Any] = dict(values)
    return replace(hw, **changes)


def figure_weights(figures: Sequence[Figure]) -> dict[str, float]:
    """1 / sqrt(figures of the same source): a source with many rows does not drown the rest."""
    counts: dict[str, int] = {}
    for f in figures:
        counts[f.source] = counts.get(f.source, 0) + 1
    return {f.id: 1.0 / math.sqrt(counts[f.source]) for f in figures}


REFUSED_PENALTY = 4.0  # squared log error charged for a refused figure (~ a factor 7.4 off)


@dataclass
class HardwareFit:
    hardware: str
    values: dict[str, float]  # every FIT_PARAMS field as fitted (or fixed)
    prior: dict[str, float]
    params: tuple[str, ...]  # the ones this fit moved
    objective: float
    figures: int
    sweeps: int


def _golden(fn: Callable[[float], float], a: float, b: float, tol: float) -> float:
    """Minimum of a unimodal-ish function on [a, b] by golden-section search."""
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = fn(c), fn(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = fn(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = fn(d)
    return (a + b) / 2


def coordinate_search(
    objective: Callable[[Mapping[str, float]], float],
    start: Mapping[str, float],
    names: Sequence[str],
    sweeps: int = 8,
    tol: float = 1e-3,
) -> tuple[dict[str, float], float, int]:
    """Minimise ``objective`` over the named parameters, one at a time.

    Each sweep runs a golden-section search along every parameter in turn (over its whole
    range, in its log coordinate), keeping the others fixed, and takes the new value only if
    it lowers the objective; sweeps repeat until nothing moves by more than ``tol`` (log
    units). Deterministic; no gradients, so it copes with the max() kinks of the roofline.
    """
    values = dict(start)
    best = objective(values)
    done = 0
    for done in range(1, sweeps + 1):  # noqa: B007 - the count is reported
        moved = 0.0
        for name in names:
            p = PARAMS[name]
            x0 = p.to_x(values[name])

            def along(x: float, name: str = name, p: Param = p) -> float:
                return objective({**values, name: p.from_x(x)})

            x = _golden(along, p.to_x(p.lo), p.to_x(p.hi), tol)
            fx = along(x)
            if fx < best - 1e-12:
                values[name] = p.from_x(x)
                best = fx
                moved = max(moved, abs(x - x0))
        if moved < tol:
            break
    return values, best, done


def _loss(
    catalog: Catalog,
    figures: Sequence[Figure],
    weights: Mapping[str, float],
) -> float:
    total = 0.0
    for f in figures:
        pred = predict_si(f, catalog)
        r2 = REFUSED_PENALTY if pred is None or pred <= 0 else math.log(pred / f.si_value) ** 2
        total += weights[f.id] * r2
    return total


def _penalty(values: Mapping[str, float], prior: Mapping[str, float],
             names: Iterable[str], weight: float = PRIOR_WEIGHT) -> float:
    total = 0.0
    for name in names:
        p = PARAMS[name]
        d = (p.to_x(values[name]) - p.to_x(prior[name])) / p.sigma
        total += weight * d * d
    return total


def _uses_fp8(figures: Iterable[Figure]) -> bool:
    return any(f.precision in ("fp8", "int8") for f in figures)


def fit_pooled(
    figures: Sequence[Figure],
    catalog: Catalog,
    weights: Mapping[str, float] | None = None,
    sweeps: int = 8,
) -> dict[str, float]:
    """One set of efficiencies and engine terms for every GPU at once (the GPU figures).

    Chip-specific terms (layer floor, interconnect latency) stay at each profile's prior. The
    result is the shared engine terms (``SHARED``) and the prior of every per-GPU fit.
    """
    gpu = [f for f in figures if catalog.get_hardware(f.hardware).kind == "gpu"]
    weights = weights if weights is not None else figure_weights(figures)
    names = [n for n in EFFICIENCIES + SHARED if n != "mfu_fp8" or _uses_fp8(gpu)]
    if not gpu:
        return dict(GPU_PRIOR)
    hws = {f.hardware: prior_of(catalog.get_hardware(f.hardware)) for f in gpu}

    def objective(v: Mapping[str, float]) -> float:
        hw = dict(catalog.hardware)
        for name, prior in hws.items():
            hw[name] = with_params(hw[name], {**prior, **v})
        return _loss(Catalog(hw, catalog.models), gpu, weights) + _penalty(v, GPU_PRIOR, names)

    values, _, _ = coordinate_search(objective, GPU_PRIOR, names, sweeps)
    if not _uses_fp8(gpu):
        values["mfu_fp8"] = values["mfu"]
    return values


def fit_hardware(
    hw: HardwareProfile,
    figures: Sequence[Figure],
    catalog: Catalog,
    prior: Mapping[str, float] | None = None,
    names: Sequence[str] | None = None,
    weights: Mapping[str, float] | None = None,
    sweeps: int = 8,
    prior_weight: float = PRIOR_WEIGHT,
) -> HardwareFit:
    """Fit one hardware profile's parameters ``names`` to its figures around ``prior``.

    ``prior`` holds a value for every FIT_PARAMS field (those not in ``names`` are fixed at
    it). A parameter that no figure depends on stays at its prior (the pull is its only term);
    ``prior_weight`` sets the pull (PRIOR_WEIGHT per squared sigma by default).
    """
    prior = dict(prior if prior is not None else prior_of(hw))
    weights = weights if weights is not None else figure_weights(figures)
    names = list(names if names is not None else EFFICIENCIES + CHIP)
    if not _uses_fp8(figures):
        names = [n for n in names if n != "mfu_fp8"]

    def objective(v: Mapping[str, float]) -> float:
        cat = Catalog({**catalog.hardware, hw.name: with_params(hw, v)}, catalog.models)
        return _loss(cat, figures, weights) + _penalty(v, prior, names, prior_weight)

    values, best, done = coordinate_search(objective, prior, names, sweeps)
    return HardwareFit(hw.name, values, prior, tuple(names), best, len(figures), done)


def fit(
    figures: Sequence[Figure],
    catalog: Catalog,
    hardware: Iterable[str] | None = None,
    sweeps: int = 8,
) -> dict[str, HardwareFit]:
    """The two-stage fit: pooled over all GPUs, then each hardware around the pooled values.

    1. ``fit_pooled``: one set of efficiencies and engine terms for all GPU figures.
    2. Each GPU: its efficiencies (``EFFICIENCIES``) and chip terms (``CHIP``) fitted to its
       own figures, pulled towards the pooled efficiencies and its hand-set chip terms; the
       engine terms (``SHARED``) stay at the pooled values. A GPU without figures of its own
       gets the pooled values. Wafer-scale chips are fitted alone around their hand priors.
    """
    weights = figure_weights(figures)
    pooled = fit_pooled(figures, catalog, weights, sweeps)
    names = sorted({f.hardware for f in figures} if hardware is None else set(hardware))
    out: dict[str, HardwareFit] = {}
    for name in names:
        hw = catalog.get_hardware(name)
        mine = [f for f in figures if f.hardware == name]
        hand = prior_of(hw)
        if hw.kind == "gpu":
            prior = {**hand, **{k: pooled[k] for k in EFFICIENCIES + SHARED}}
        else:
            prior = hand
        if not mine:
            out[name] = HardwareFit(name, dict(prior), prior, (), 0.0, 0, 0)
            continue
        out[name] = fit_hardware(hw, mine, catalog, prior, EFFICIENCIES + CHIP, weights, sweeps)
    return out


def apply_fits(catalog: Catalog, fits: Mapping[str, HardwareFit]) -> Catalog:
    hw = dict(catalog.hardware)
    for name, f in fits.items():
        hw[name] = with_params(hw[name], f.values)
    return Catalog(hw, catalog.models)


def prior_catalog(catalog: Catalog) -> Catalog:
    """The catalog with every profile that has PRIORS reset to them (the unfitted model)."""
    hw = {n: with_params(h, PRIORS[n]) if n in PRIORS else h for n, h in catalog.hardware.items()}
    return Catalog(hw, catalog.models)


@dataclass
class CrossValidation:
    results: list[Result]  # each figure predicted by the fit that did not see its source
    folds: dict[str, dict[str, HardwareFit]] = field(default_factory=dict)


def cross_validate(
    figures: Sequence[Figure], catalog: Catalog, sweeps: int = 8
) -> CrossValidation:
    """Leave-one-source-out: for each source, fit on the others and predict its figures.

    Both stages start from the hand priors every time (not from the shipped fitted values),
    so a held-out source's figures never influence the parameters that predict them; a
    hardware that only the held-out source measured gets the pooled GPU values.
    """
    base = prior_catalog(catalog)
    by_source: dict[str, list[Figure]] = {}
    for f in figures:
        by_source.setdefault(f.source, []).append(f)
    results: list[Result] = []
    folds: dict[str, dict[str, HardwareFit]] = {}
    for source, held in sorted(by_source.items()):
        train = [f for f in figures if f.source != source]
        fits = fit(train, base, hardware={f.hardware for f in held}, sweeps=sweeps)
        folds[source] = fits
        cat = apply_fits(base, fits)
        results.extend(Result(f, predict_figure(f, cat)) for f in held)
    order = {f.id: i for i, f in enumerate(figures)}
    results.sort(key=lambda r: order[r.figure.id])
    return CrossValidation(results, folds)


# ------------------------------------------------------------------------------------------
# Writing fitted values
# ------------------------------------------------------------------------------------------

__all__ = [
    "CHIP",
    "CrossValidation",
    "EFFICIENCIES",
    "FIT_PARAMS",
    "GPU_PRIOR",
    "HardwareFit",
    "PARAMS",
    "PRIORS",
    "PRIOR_WEIGHT",
    "Param",
    "REFUSED_PENALTY",
    "SHARED",
    "_uses_fp8",
    "apply_fits",
    "coordinate_search",
    "cross_validate",
    "figure_weights",
    "fit",
    "fit_hardware",
    "fit_pooled",
    "prior_catalog",
    "prior_of",
    "with_params",
]
