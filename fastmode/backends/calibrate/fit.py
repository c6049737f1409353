"""The fit: efficiency parameters per hardware by coordinate search, and cross-validation."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fastmode.backends.calibrate.engines import (
    REFERENCE_ENGINE,
    EngineProfile,
    Engines,
    inherit_engines,
)
from fastmode.backends.calibrate.figures import CalibrationError, Figure, predict_si
from fastmode.backends.calibrate.lineage import held_at_prior, informed_terms, measured_sibling
from fastmode.backends.calibrate.params import (
    CHIP,
    CHIP_EFFICIENCIES,
    EFFICIENCIES,
    ENGINE_SPECS,
    FIT_PARAMS,
    GPU_PRIOR,
    PARAMS,
    PRIOR_WEIGHT,
    PRIORS,
    SHARED,
    Param,
)
from fastmode.backends.calibrate.scope import fitted_figures
from fastmode.backends.calibrate.search import coordinate_search, param
from fastmode.backends.dequant import dequantises
from fastmode.backends.profiles import FOUR_BIT, Catalog, HardwareProfile, canonical_precision


def prior_of(hw: HardwareProfile) -> dict[str, float]:
    """The hand-set starting point of a profile: PRIORS, or the profile's own values."""
    if hw.name in PRIORS:
        return dict(PRIORS[hw.name])
    fallback = {"mbu_kv": hw.mbu, "mfu_fp8": hw.gemm_efficiency("fp8"),
                "mfu_fp4": hw.mfu_fp8 if hw.mfu_fp8 is not None else hw.mfu}
    return {name: float(getattr(hw, name) if getattr(hw, name) is not None else
                        fallback.get(name, hw.mfu))
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


def _loss(
    catalog: Catalog,
    figures: Sequence[Figure],
    weights: Mapping[str, float],
    engines: Engines | None = None,
) -> float:
    total = 0.0
    for f in figures:
        pred = predict_si(f, catalog, engines)
        r2 = REFUSED_PENALTY if pred is None or pred <= 0 else math.log(pred / f.si_value) ** 2
        total += weights[f.id] * r2
    return total


def _penalty(values: Mapping[str, float], prior: Mapping[str, float],
             names: Iterable[str], weight: float = PRIOR_WEIGHT) -> float:
    total = 0.0
    for name in names:
        p = param(name)
        d = (p.to_x(values[name]) - p.to_x(prior[name])) / p.sigma
        total += weight * d * d
    return total


def _uses_fp8(figures: Iterable[Figure]) -> bool:
    return any(f.precision in ("fp8", "int8") for f in figures)


def _uses_fp4(figures: Iterable[Figure], catalog: Catalog | None = None) -> bool:
    """Figures whose GEMMs run on an fp4 tensor-core rate (4-bit weights on a chip that
    has one)."""
    for f in figures:
        if canonical_precision(f.precision) not in FOUR_BIT:
            continue
        if catalog is None or "fp4" in catalog.get_hardware(f.hardware).tflops:
            return True
    return False


def _free_names(names: Iterable[str], figures: Sequence[Figure], catalog: Catalog) -> list[str]:
    """The names a fit can move: the 8-bit and 4-bit efficiencies only where figures use them."""
    out = list(names)
    if not _uses_fp8(figures):
        out = [n for n in out if n != "mfu_fp8"]
    if not _uses_fp4(figures, catalog):
        out = [n for n in out if n != "mfu_fp4"]
    if not any(dequantises(catalog.get_hardware(f.hardware), f.precision) for f in figures):
        out = [n for n in out if n != "w4a16_efficiency"]  # no W4A16 GEMM: at its prior
    return out


def _engine_values(engines: Engines, values: Mapping[str, float]) -> dict[str, EngineProfile]:
    """Engines with the ``ENGINE/field`` entries of ``values`` put in."""
    out = dict(engines)
    for name, e in engines.items():
        mine = {k.split("/", 1)[1]: v for k, v in values.items() if k.startswith(name + "/")}
        if mine:
            out[name] = e.with_values(mine)
    return out


def _engines_seen(figures: Iterable[Figure], engines: Engines) -> list[str]:
    names = []
    for name, e in engines.items():
        if any(e.covers(f.engine) for f in figures):
            names.append(name)
    return names


def _relevance_groups(
    figures: Sequence[Figure], catalog: Catalog, engines: Engines,
) -> dict[tuple[str, str, bool, bool], tuple[list[Figure], tuple[str, ...]]]:
    """The figures grouped by (engine, tensor-core row, MoE, MLA), each with the pooled parameters
    its predictions depend on (sorted names): every chip and shared term but the other
    precisions' GEMM efficiencies and, for a dense model, the expert read efficiency, and its
    own engine's terms."""
    out: dict[tuple[str, str, bool, bool], tuple[list[Figure], tuple[str, ...]]] = {}
    chip_shared = [n for n in EFFICIENCIES + SHARED if n != "step_overhead_ms"]
    for f in figures:
        eng = next((n for n, e in engines.items() if e.covers(f.engine)), "")
        hw = catalog.get_hardware(f.hardware)
        row = "w4a16" if dequantises(hw, f.precision) else hw.rate_precision(f.precision)
        moe, mla = catalog.get_model(f.model).is_moe, catalog.get_model(f.model).is_mla
        key = (eng, row, moe, mla)
        if key not in out:
            skip = {"mfu_fp8"} if row not in ("fp8", "int8") else set()
            if row != "fp4":
                skip.add("mfu_fp4")
            if row != "w4a16":
                skip.add("w4a16_efficiency")
            if not moe:
                skip |= {"expert_read_efficiency", "expert_compute_efficiency",
                         "moe_layer_latency_us", "expert_load_cv2"}
            if not mla:
                skip.add("mla_layer_latency_us")
            names = [n for n in chip_shared if n not in skip] + ["step_overhead_ms"]
            names += [f"{eng}/{k}" for k in ENGINE_SPECS] if eng else []
            out[key] = ([], tuple(sorted(names)))
        out[key][0].append(f)
    return out


def fit_pooled(
    figures: Sequence[Figure],
    catalog: Catalog,
    weights: Mapping[str, float] | None = None,
    sweeps: int = 8,
    engines: Engines | None = None,
) -> tuple[dict[str, float], dict[str, EngineProfile]]:
    """One set of chip efficiencies, the shared kernel terms and every engine's terms, for
    every GPU at once (the GPU figures).

    Chip-specific terms (layer floor, interconnect latency) stay at each profile's prior. The
    result is the shared terms (``SHARED``), the prior of every per-GPU fit, and the engines
    (each fitted to the figures of every source measured on it, starting from its prior).
    """
    engines = dict(engines or {})
    gpu = [f for f in figures if catalog.get_hardware(f.hardware).kind == "gpu"]
    weights = weights if weights is not None else figure_weights(figures)
    chip = CHIP_EFFICIENCIES if engines else EFFICIENCIES
    names = _free_names(chip + SHARED, gpu, catalog)
    start: dict[str, float] = {k: v for k, v in GPU_PRIOR.items() if k in chip + SHARED}
    start.update({k: v for k, v in GPU_PRIOR.items() if k not in start})
    seen = _engines_seen(gpu, engines)
    fixed = held_at_prior(gpu, engines)
    for e in seen:
        for k, v in engines[e].values().items():
            start[f"{e}/{k}"] = v
            if k in fixed.get(e, ()):
                continue  # the figures cannot tell it apart (lineage.held_at_prior)
            if k == "gqa_reread" and v == 0:
                continue  # kernels known to read a GQA group's KV once stay so
            if k in ("bandwidth_scale", "compute_scale") and e == REFERENCE_ENGINE:
                continue  # the hardware profiles' efficiencies are the reference engine's
            names.append(f"{e}/{k}")
    prior = dict(start)
    if not gpu:
        return dict(GPU_PRIOR), engines
    hws = {f.hardware: prior_of(catalog.get_hardware(f.hardware)) for f in gpu}
    groups = _relevance_groups(gpu, catalog, engines)
    memo: dict[tuple[object, ...], float] = {}

    def objective(v: Mapping[str, float]) -> float:
        # Each group of figures depends on a subset of the parameters (an engine's terms only
        # move its own figures, mfu_fp8 only 8-bit ones...): a group whose parameters did not
        # change since it was last evaluated costs a dictionary look-up.
        total = _penalty(v, prior, names)
        cat: Catalog | None = None
        for key, (figs, relevant) in groups.items():
            mkey = (key, tuple(v[k] for k in relevant if k in v))
            loss = memo.get(mkey)
            if loss is None:
                if cat is None:
                    hw = dict(catalog.hardware)
                    mine = {k: x for k, x in v.items() if "/" not in k}
                    for name, hand in hws.items():
                        hw[name] = with_params(hw[name], {**hand, **mine})
                    cat = Catalog(hw, catalog.models)
                loss = memo[mkey] = _loss(cat, figs, weights, _engine_values(engines, v))
            total += loss
        return total

    values, _, _ = coordinate_search(objective, start, names, sweeps)
    if not _uses_fp8(gpu):
        values["mfu_fp8"] = values["mfu"]
    if not _uses_fp4(gpu, catalog):
        values["mfu_fp4"] = values["mfu_fp8"]
    fitted = _engine_values(engines, values)
    return {k: v for k, v in values.items() if "/" not in k}, fitted


def fit_hardware(
    hw: HardwareProfile,
    figures: Sequence[Figure],
    catalog: Catalog,
    prior: Mapping[str, float] | None = None,
    names: Sequence[str] | None = None,
    weights: Mapping[str, float] | None = None,
    sweeps: int = 8,
    prior_weight: float = PRIOR_WEIGHT,
    engines: Engines | None = None,
) -> HardwareFit:
    """Fit one hardware profile's parameters ``names`` to its figures around ``prior``.

    ``prior`` holds a value for every FIT_PARAMS field (those not in ``names`` are fixed at
    it). A parameter that no figure depends on stays at its prior (the pull is its only term);
    ``prior_weight`` sets the pull (PRIOR_WEIGHT per squared sigma by default). ``engines``:
    the engine profiles the figures were measured on (None: the shipped ones).
    """
    prior = dict(prior if prior is not None else prior_of(hw))
    weights = weights if weights is not None else figure_weights(figures)
    names = list(names if names is not None else EFFICIENCIES + CHIP)
    names = _free_names(names, figures, catalog)

    def objective(v: Mapping[str, float]) -> float:
        cat = Catalog({**catalog.hardware, hw.name: with_params(hw, v)}, catalog.models)
        return _loss(cat, figures, weights, engines) + _penalty(v, prior, names, prior_weight)

    values, best, done = coordinate_search(objective, prior, names, sweeps)
    return HardwareFit(hw.name, values, prior, tuple(names), best, len(figures), done)


@dataclass
class Fit:
    """The two-stage fit: every hardware profile's values and the engines'."""

    hardware: dict[str, HardwareFit]
    engines: dict[str, EngineProfile] = field(default_factory=dict)
    gpus: frozenset[str] = frozenset()

    def hardware_values(self, name: str) -> dict[str, float]:
        """What hardware.toml gets: the profile's values, with the reference engine's
        overheads (what ``fastmode serve`` imitates: its API server's included) for a GPU."""
        values = dict(self.hardware[name].values)
        ref = self.engines.get(REFERENCE_ENGINE)
        if ref is not None and name in self.gpus:
            values["request_overhead_ms"] = ref.first_token_overhead_ms(server=True)
            values["step_overhead_ms"] = ref.step_overhead_ms
            values["seq_overhead_us"] = ref.seq_overhead_us
            values["request_us_per_prompt_token"] = ref.serving_us_per_token
        return values


def fit(
    figures: Sequence[Figure],
    catalog: Catalog,
    hardware: Iterable[str] | None = None,
    sweeps: int = 8,
    engines: Engines | None = None,
) -> Fit:
    """The two-stage fit: pooled over all GPUs (with the engines), then each hardware.

    1. ``fit_pooled``: one set of chip efficiencies, the shared kernel terms and the engines'
       terms (``ENGINE_PARAMS``, each engine from the figures measured on it) for all GPU
       figures.
    2. Each GPU: its efficiencies (``CHIP_EFFICIENCIES``) and chip terms (``CHIP``) fitted
       to its own figures, pulled towards the pooled efficiencies and its hand-set chip terms;
       the shared terms and the engines stay at the pooled values. A GPU without figures of
       its own gets the pooled values. Wafer-scale chips are fitted alone around their hand
       priors (their figures name no engine profile).

    ``engines``: the engine profiles to start from (their priors, ``engine_priors``); None
    fits the hardware alone, every figure on the hardware's own overheads (as before engines).

    Figures in a regime the model does not model (``scope.scored_only_reason``: MoE runs with
    thousands of sequences queued) are left out here, and only here: they are still predicted
    and scored in every error table, but move no parameter.
    """
    figures = fitted_figures(figures, catalog)
    weights = figure_weights(figures)
    engines = dict(engines or {})
    pooled, fitted_engines = fit_pooled(figures, catalog, weights, sweeps, engines)
    gpu_figs = [f for f in figures if catalog.get_hardware(f.hardware).kind == "gpu"]
    fitted_engines = inherit_engines(fitted_engines, *informed_terms(gpu_figs, fitted_engines))
    names = sorted({f.hardware for f in figures} if hardware is None else set(hardware))
    chip = CHIP_EFFICIENCIES if engines else EFFICIENCIES
    out: dict[str, HardwareFit] = {}

    def fit_one(name: str) -> HardwareFit:
        hw = catalog.get_hardware(name)
        mine = [f for f in figures if f.hardware == name]
        hand = prior_of(hw)
        if hw.kind == "gpu":
            prior = {**hand, **{k: pooled[k] for k in EFFICIENCIES + SHARED if k in pooled}}
        else:
            prior = hand
        if not mine:
            sibling = measured_sibling(name, figures)
            if sibling is not None:
                if sibling not in out:
                    out[sibling] = fit_one(sibling)
                theirs = out[sibling].values
                prior = {**prior, **{k: theirs[k] for k in CHIP_EFFICIENCIES + CHIP}}
            return HardwareFit(name, dict(prior), prior, (), 0.0, 0, 0)
        free = chip + CHIP if hw.kind == "gpu" else EFFICIENCIES + CHIP
        return fit_hardware(hw, mine, catalog, prior, free, weights, sweeps,
                            engines=fitted_engines)

    for name in names:
        if name not in out:
            out[name] = fit_one(name)
    gpus = frozenset(n for n in out if catalog.get_hardware(n).kind == "gpu")
    return Fit(out, fitted_engines, gpus)


def apply_fits(catalog: Catalog, fits: Fit | Mapping[str, HardwareFit]) -> Catalog:
    hw = dict(catalog.hardware)
    table = fits.hardware if isinstance(fits, Fit) else fits
    for name in table:
        values = fits.hardware_values(name) if isinstance(fits, Fit) else table[name].values
        hw[name] = with_params(hw[name], values)
    return Catalog(hw, catalog.models)


def prior_catalog(catalog: Catalog) -> Catalog:
    """The catalog with every profile that has PRIORS reset to them (the unfitted model)."""
    hw = {n: with_params(h, PRIORS[n]) if n in PRIORS else h for n, h in catalog.hardware.items()}
    return Catalog(hw, catalog.models)


__all__ = [
    "CHIP",
    "CHIP_EFFICIENCIES",
    "EFFICIENCIES",
    "ENGINE_SPECS",
    "FIT_PARAMS",
    "Fit",
    "GPU_PRIOR",
    "HardwareFit",
    "PARAMS",
    "PRIORS",
    "PRIOR_WEIGHT",
    "Param",
    "REFUSED_PENALTY",
    "SHARED",
    "_uses_fp4",
    "_uses_fp8",
    "apply_fits",
    "coordinate_search",
    "figure_weights",
    "fit",
    "fit_hardware",
    "fit_pooled",
    "param",
    "prior_catalog",
    "prior_of",
    "with_params",
]
