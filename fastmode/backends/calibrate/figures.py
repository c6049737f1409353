"""Measured figures: loading them, and the model's prediction of each."""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastmode.backends.calibrate.engines import Engines, engine_for, load_engines
from fastmode.backends.calibrate.figure import METRICS, SCENARIOS, UNITS, CalibrationError, Figure
from fastmode.backends.calibrate.harness import HARNESSES, through_server
from fastmode.backends.perf import Placement
from fastmode.backends.perf_serving import (
    Workload,
    batch_that_fits,
    finite_run_throughput,
    serving_steady_state,
    static_batch,
    waves_throughput,
)
from fastmode.backends.profiles import Catalog, ProfileError
from fastmode.backends.speculative import mtp_draft, speculative_placement


def figure_from_dict(raw: Mapping[str, Any], index: int = 0) -> Figure:
    where = f"figures[{index}]"
    known = {f for f in Figure.__dataclass_fields__}
    unknown = set(raw) - known
    if unknown:
        raise CalibrationError(f"{where}: unknown field(s) {sorted(unknown)}")
    try:
        fig = Figure(**dict(raw))
    except TypeError as exc:
        raise CalibrationError(f"{where}: {exc}") from None
    if fig.scenario not in SCENARIOS:
        raise CalibrationError(f"{where}.scenario: {fig.scenario!r}; allowed: {', '.join(SCENARIOS)}")
    if fig.metric not in METRICS:
        raise CalibrationError(f"{where}.metric: {fig.metric!r}; allowed: {', '.join(METRICS)}")
    if fig.unit not in UNITS[fig.metric]:
        raise CalibrationError(
            f"{where}.unit: {fig.unit!r} for {fig.metric}; allowed: {', '.join(UNITS[fig.metric])}"
        )
    for name in ("chips", "batch", "prompt_tokens", "output_tokens"):
        if getattr(fig, name) <= 0:
            raise CalibrationError(f"{where}.{name}: must be > 0")
    if not fig.value > 0:
        raise CalibrationError(f"{where}.value: must be > 0")
    if not 0 < fig.length_ratio <= 1:
        raise CalibrationError(f"{where}.length_ratio: must be in (0, 1]")
    if fig.harness and fig.harness not in HARNESSES:
        raise CalibrationError(f"{where}.harness: {fig.harness!r}; allowed: {', '.join(HARNESSES)}")
    if fig.speculative and not (fig.draft_tokens >= 1 and 0 < fig.acceptance < 1):
        raise CalibrationError(f"{where}.speculative: needs draft_tokens >= 1 and acceptance "
                               "in (0, 1)")
    return fig


def load_figures(text: str) -> tuple[dict[str, dict[str, Any]], list[Figure]]:
    """Sources and figures of a measurement file (TOML text)."""
    data = tomllib.loads(text)
    sources = data.get("sources", {})
    figures = [figure_from_dict(raw, i) for i, raw in enumerate(data.get("figures", []))]
    ids = [f.id for f in figures]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise CalibrationError(f"figures: duplicate id(s) {dup}")
    for f in figures:
        if sources and f.source not in sources:
            raise CalibrationError(f"figure {f.id}: source {f.source!r} is not in [sources]")
    return sources, figures


def load_published() -> tuple[dict[str, dict[str, Any]], list[Figure]]:
    """The public calibration set shipped in fastmode/backends/data/measurements/published.toml."""
    text = (
        resources.files("fastmode.backends.data").joinpath("measurements/published.toml").read_text("utf-8")
    )
    return load_figures(text)


# ------------------------------------------------------------------------------------------
# Prediction
# ------------------------------------------------------------------------------------------


_SHIPPED: dict[str, Engines] = {}


def shipped_engines() -> Engines:
    """The engine profiles of fastmode/backends/data/engines.toml (read once)."""
    if "e" not in _SHIPPED:
        _SHIPPED["e"] = load_engines()
    return _SHIPPED["e"]


def placement(fig: Figure, catalog: Catalog, engines: Engines | None = None) -> Placement:
    """The replica a figure was measured on, with its engine's terms and memory rule (raises
    ProfileError if refused)."""
    model = catalog.get_model(fig.model)
    hw = catalog.get_hardware(fig.hardware)
    eng = engine_for(fig.engine, shipped_engines() if engines is None else engines)
    memory: dict[str, Any]
    if eng is not None and hw.kind == "gpu":
        hw = eng.hardware(hw, server=through_server(fig))
        read = eng.kv_read_factor(model)
        memory = eng.memory(fig.memory_fraction, _budget(fig))
    else:
        read = 1.0
        memory = {"memory_utilization": fig.memory_fraction or 0.9}
    p: Placement = Placement(model, hw, fig.chips, fig.precision, kv_precision=fig.kv_precision,
                             kv_read_factor=read, attention_dp=fig.attention_dp,
                             expert_parallel=fig.expert_parallel, **memory)
    if fig.speculative:
        draft = mtp_draft(model) if fig.speculative == "mtp" else catalog.get_model(
            fig.speculative)
        p = speculative_placement(p, draft, fig.chips, fig.draft_tokens, fig.acceptance)
    return p


def _budget(fig: Figure) -> int:
    """The step token budget whose activations the engine reserves."""
    if fig.max_batched_tokens is not None:
        return fig.max_batched_tokens
    return 8192 if fig.scenario == "serving" else min(16384, fig.batch * fig.prompt_tokens)


def is_offline_waves(fig: Figure) -> bool:
    """A throughput of fixed-length requests, ``requests`` of them in the run: what
    ``waves_throughput`` predicts (every request queued at once, or a closed loop of that many
    users started together, runs in waves of the batch)."""
    return (fig.scenario == "serving" and fig.length_ratio >= 1 and bool(fig.requests)
            and not fig.speculative
            and fig.metric in ("throughput", "throughput_per_chip"))


def workload(fig: Figure, catalog: Catalog, engines: Engines | None = None) -> Workload:
    """The model's steady state for a figure's conditions (raises ProfileError if refused).

    ``engines``: the engine profiles (None: the shipped ones); the one covering the figure's
    ``engine`` supplies its software terms (request and step overheads, GQA KV reads).
    """
    p = placement(fig, catalog, engines)
    if fig.scenario == "static":
        return static_batch(p, fig.batch, fig.prompt_tokens, fig.output_tokens,
                            fig.max_batched_tokens, request_overhead=True)
    lag = 1 if fig.async_scheduling else 0
    if fig.length_ratio < 1:
        mean = (1 + fig.length_ratio) / 2
        return serving_steady_state(
            p, fig.batch, max(1, round(fig.prompt_tokens * mean)),
            max(1, round(fig.output_tokens * mean)), fig.max_batch,
            fig.max_batched_tokens or 8192, arrivals="spread", lag_steps=lag,
            request_overhead=True,
        )
    return serving_steady_state(
        p, fig.batch, fig.prompt_tokens, fig.output_tokens, fig.max_batch,
        fig.max_batched_tokens or 8192, lag_steps=lag, request_overhead=True,
    )


def predict_si(fig: Figure, catalog: Catalog, engines: Engines | None = None) -> float | None:
    """The figure's metric as the model predicts it, in seconds or tokens/s; None if refused."""
    try:
        w = workload(fig, catalog, engines)
    except ProfileError:
        return None
    if fig.metric == "ttft":
        return w.ttft_s
    if fig.metric == "itl":
        return w.itl_s
    if fig.metric == "e2e":
        return w.e2e_s
    tput = w.output_tokens_per_s
    if fig.requests and fig.scenario == "serving" and fig.length_ratio < 1:
        tput = finite_run_throughput(w, fig.requests)  # users out of step: a ragged drain
    elif fig.requests and is_offline_waves(fig):  # one length, started together: waves
        # of the batch whose whole replies fit: a wave's replies grow together, so a paged
        # engine preempts what it admitted beyond them and recomputes it in a later wave
        pl = placement(fig, catalog, engines)
        wave = batch_that_fits(pl, w.running, fig.prompt_tokens + fig.output_tokens,
                               fig.max_batch)
        tput = waves_throughput(pl, fig.requests, wave, fig.prompt_tokens, fig.output_tokens,
                                _budget(fig))
    if fig.metric == "throughput":
        return tput
    if fig.metric == "throughput_per_chip":
        return tput / fig.chips
    return 1.0 / w.itl_s  # user_tokens_per_s


def predict_figure(fig: Figure, catalog: Catalog,
                   engines: Engines | None = None) -> float | None:
    """The prediction in the figure's own unit; None if the model refuses the placement."""
    si = predict_si(fig, catalog, engines)
    return None if si is None else si / UNITS[fig.metric][fig.unit]


@dataclass(frozen=True)
class Result:
    figure: Figure
    predicted: float | None  # in the figure's unit

    @property
    def error(self) -> float | None:
        """Relative error, predicted / measured - 1 (None when refused)."""
        return None if self.predicted is None else self.predicted / self.figure.value - 1.0


def evaluate(figures: Iterable[Figure], catalog: Catalog,
             engines: Engines | None = None) -> list[Result]:
    return [Result(f, predict_figure(f, catalog, engines)) for f in figures]


@dataclass(frozen=True)
class ErrorStats:
    n: int
    refused: int
    median_abs: float  # median absolute relative error of the figures predicted
    worst_abs: float
    worst_id: str = ""


def error_stats(results: Sequence[Result]) -> ErrorStats:
    errs = [(abs(r.error), r.figure.id) for r in results if r.error is not None]
    refused = sum(1 for r in results if r.error is None)
    if not errs:
        return ErrorStats(len(results), refused, math.nan, math.nan)
    worst = max(errs)
    return ErrorStats(
        len(results), refused, statistics.median(e for e, _ in errs), worst[0], worst[1]
    )


def group_stats(
    results: Sequence[Result], key: Callable[[Figure], str]
) -> dict[str, ErrorStats]:
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(key(r.figure), []).append(r)
    return {k: error_stats(v) for k, v in sorted(groups.items())}


# ------------------------------------------------------------------------------------------
# Fitting
# ------------------------------------------------------------------------------------------

__all__ = [
    "CalibrationError",
    "ErrorStats",
    "Figure",
    "METRICS",
    "Result",
    "SCENARIOS",
    "UNITS",
    "error_stats",
    "evaluate",
    "figure_from_dict",
    "group_stats",
    "is_offline_waves",
    "load_figures",
    "load_published",
    "placement",
    "predict_figure",
    "predict_si",
    "shipped_engines",
    "workload",
]
