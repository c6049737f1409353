"""The fit: efficiency parameters per hardware by coordinate search, and cross-validation."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..profiles import FOUR_BIT, Catalog, HardwareProfile, canonical_precision
from .engines import REFERENCE_ENGINE, EngineProfile, Engines
from .figures import CalibrationError, Figure, predict_si


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
    Param("mfu_fp4", 0.1, 0.95, 0.3),
    Param("gemm_half_tokens", 0.0, 4096.0, 1.5, offset=8.0),
    Param("attention_half_tokens", 0.0, 16384.0, 1.5, offset=32.0),
    Param("expert_read_efficiency", 0.3, 1.0, 0.3),
    Param("expert_compute_efficiency", 0.1, 1.0, 0.5),
    Param("moe_layer_latency_us", 0.0, 400.0, 2.0, offset=1.0),
    Param("mla_layer_latency_us", 0.0, 400.0, 2.0, offset=1.0),
    # the reference engine's, written into a GPU's profile beside its step overhead (not fitted
    # per hardware)
    Param("seq_overhead_us", 0.0, 50.0, 1.5, offset=1.0),
)}
# An engine's terms (EngineProfile fields; fitted as "ENGINE/field"), searched the same way.
ENGINE_SPECS: dict[str, Param] = {p.name: p for p in (
    Param("request_overhead_ms", 0.0, 200.0, 1.5, offset=2.0),
    Param("step_overhead_ms", 0.02, 15.0, 1.0),
    Param("gqa_reread", 0.0, 1.0, 1.0, offset=0.1),
    Param("bandwidth_scale", 0.5, 1.5, 0.15),
    Param("compute_scale", 0.4, 2.0, 0.25),
    Param("seq_overhead_us", 0.0, 50.0, 1.5, offset=1.0),
)}
# Kernel behaviour common to the GPU engines: fitted once over all GPU figures, then fixed.
SHARED = ("gemm_min_tokens", "roofline_overlap", "gemm_half_tokens", "attention_half_tokens",
          "expert_read_efficiency", "expert_compute_efficiency", "mla_layer_latency_us")
# Efficiencies of one chip: fitted per hardware, pulled towards the pooled fit of all GPUs.
# (step_overhead_ms is an engine term for the public set, a hardware one for your own server.)
EFFICIENCIES = ("mbu", "mbu_kv", "mfu", "mfu_fp8", "mfu_fp4", "step_overhead_ms")
CHIP_EFFICIENCIES = ("mbu", "mbu_kv", "mfu", "mfu_fp8", "mfu_fp4")
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
# GEMM efficiency by size starts at half of the large-GEMM rate at 128 rows (a 128-row tile
# fills one wave of a Hopper / Blackwell GEMM), attention at half its rate at 1,024 tokens
# (FlashAttention-2/3 forward benchmarks rise from short to long sequences), expert reads at
# the dense weights' efficiency, and an MoE FFN or an MLA attention adding ~2 us to a layer's
# latency floor (their extra kernels, TensorRT-LLM tech blog 1, at ~0.7 us each under CUDA graphs).
_SHARED_PRIOR = {"gemm_min_tokens": 64.0, "roofline_overlap": 1.0, "request_overhead_ms": 5.0,
                 "gemm_half_tokens": 128.0, "attention_half_tokens": 1024.0,
                 "expert_read_efficiency": 1.0, "expert_compute_efficiency": 1.0,
                 "moe_layer_latency_us": 0.0,
                 "mla_layer_latency_us": 2.0}


def _gpu(mbu: float, mfu: float, layer_us: float, allreduce_us: float,
         step_ms: float = 1.0) -> dict[str, float]:
    return {"mbu": mbu, "mbu_kv": mbu, "mfu": mfu, "mfu_fp8": mfu, "mfu_fp4": mfu,
            "step_overhead_ms": step_ms, "layer_latency_us": layer_us,
            "interconnect_latency_us": allreduce_us, **_SHARED_PRIOR}


PRIORS: dict[str, dict[str, float]] = {
    "a100-40g": _gpu(0.65, 0.5, 8.0, 35.0),
    "a100-80g": _gpu(0.65, 0.5, 8.0, 35.0),
    "h100-sxm": _gpu(0.7, 0.5, 6.0, 28.0),
    "h200": _gpu(0.7, 0.5, 6.0, 28.0),
    "gh200": _gpu(0.7, 0.5, 6.0, 28.0),
    "b200": _gpu(0.65, 0.45, 5.0, 9.8),
    "b300": _gpu(0.65, 0.45, 5.0, 9.8),
    # NVL72 racks: the B200's chip, NVLink through the rack's switch trays
    "gb200-nvl72": _gpu(0.65, 0.45, 5.0, 11.0),
    "gb300-nvl72": _gpu(0.65, 0.45, 5.0, 11.0),
    # AMD Instinct: ROCm kernels (hipBLASLt, CK / AITER attention) reach less of their peaks
    # than CUDA's on Hopper (AMD's own MI300X tuning guides: "Best practices for competitive
    # inference optimization on AMD Instinct MI300X", ROCm blog); all-reduce over the
    # Infinity Fabric mesh ~30 us (RCCL / custom all-reduce); estimates
    "mi300x": _gpu(0.6, 0.45, 8.0, 30.0, 1.3),
    "mi325x": _gpu(0.6, 0.45, 8.0, 30.0, 1.3),
    "mi355x": _gpu(0.6, 0.4, 7.0, 25.0, 1.3),
    # a wafer's dataflow has no kernels to launch: its per-layer pipeline latency is
    # layer_latency_us whatever the layer holds, and no GEMM ramps up by size
    "wse-3": {"mbu": 0.5, "mbu_kv": 0.5, "mfu": 0.3, "mfu_fp8": 0.3, "mfu_fp4": 0.3,
              "step_overhead_ms": 0.1, "layer_latency_us": 20.0,
              "interconnect_latency_us": 15.0,
              **{**_SHARED_PRIOR, "gemm_half_tokens": 0.0, "attention_half_tokens": 0.0,
                 "moe_layer_latency_us": 0.0, "mla_layer_latency_us": 0.0}},
}
# The generic GPU estimate the pooled fit starts from (the reference's mid-range values).
GPU_PRIOR = {"mbu": 0.7, "mbu_kv": 0.7, "mfu": 0.5, "mfu_fp8": 0.5, "mfu_fp4": 0.5,
             "step_overhead_ms": 1.0, **_SHARED_PRIOR}
PRIOR_WEIGHT = 0.02  # a parameter one sigma from its prior costs as much as ~2 figures 10% off

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


def param(name: str) -> Param:
    """The Param of a fitted name: a profile field, or ``ENGINE/field`` for an engine's."""
    if "/" in name:
        return ENGINE_SPECS[name.rsplit("/", 1)[-1]]
    return PARAMS[name]


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
            p = param(name)
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
        row = catalog.get_hardware(f.hardware).rate_precision(f.precision)
        moe, mla = catalog.get_model(f.model).is_moe, catalog.get_model(f.model).is_mla
        key = (eng, row, moe, mla)
        if key not in out:
            skip = {"mfu_fp8"} if row not in ("fp8", "int8") else set()
            if row != "fp4":
                skip.add("mfu_fp4")
            if not moe:
                skip |= {"expert_read_efficiency", "expert_compute_efficiency",
                         "moe_layer_latency_us"}
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
    for e in seen:
        for k, v in engines[e].values().items():
            start[f"{e}/{k}"] = v
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
        overheads (what ``fastmode serve`` imitates) for a GPU."""
        values = dict(self.hardware[name].values)
        ref = self.engines.get(REFERENCE_ENGINE)
        if ref is not None and name in self.gpus:
            values["request_overhead_ms"] = ref.request_overhead_ms
            values["step_overhead_ms"] = ref.step_overhead_ms
            values["seq_overhead_us"] = ref.seq_overhead_us
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
    """
    weights = figure_weights(figures)
    engines = dict(engines or {})
    pooled, fitted_engines = fit_pooled(figures, catalog, weights, sweeps, engines)
    names = sorted({f.hardware for f in figures} if hardware is None else set(hardware))
    chip = CHIP_EFFICIENCIES if engines else EFFICIENCIES
    out: dict[str, HardwareFit] = {}
    for name in names:
        hw = catalog.get_hardware(name)
        mine = [f for f in figures if f.hardware == name]
        hand = prior_of(hw)
        if hw.kind == "gpu":
            prior = {**hand, **{k: pooled[k] for k in EFFICIENCIES + SHARED if k in pooled}}
        else:
            prior = hand
        if not mine:
            out[name] = HardwareFit(name, dict(prior), prior, (), 0.0, 0, 0)
            continue
        free = chip + CHIP if hw.kind == "gpu" else EFFICIENCIES + CHIP
        out[name] = fit_hardware(hw, mine, catalog, prior, free, weights, sweeps,
                                 engines=fitted_engines)
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
