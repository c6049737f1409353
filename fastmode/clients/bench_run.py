"""What ``fastmode bench`` does, without its command line: a typed plan -> load -> figures.

``fastmode/cli/bench.py`` turns flags into a ``BenchPlan``; ``run_bench`` runs it and returns a
``BenchOutcome`` (the JSON document, the records for the plots, the measured-vs-simulated rows);
``run_sweep`` does the same for ``--scenario fast-share``. Nothing here prints.

The pieces: workload (``clients.workload`` / ``clients.trace_reader``) -> load
(``clients.worker_processes`` / ``clients.loadgen``) -> figures (``clients.stats``) -> JSON
document (``clients.report``) and plots (``clients.plots``); ``--compare-sim``
(``clients.simcompare``) and ``--scenario`` (``clients.scenarios``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastmode.clients.load_config import LoadConfig, LoadError
from fastmode.clients.records import RunResult
from fastmode.clients.report import SCHEMA_VERSION, document, json_safe
from fastmode.clients.scenarios import run_fast_share
from fastmode.clients.stats import Price, summarise
from fastmode.clients.worker_processes import execute
from fastmode.clients.workload import (
    FlagWorkload,
    LengthDist,
    RequestSpec,
    Route,
    WorkloadError,
    parse_mix,
)

DEFAULT_REQUESTS = 100


def flag_workload(
    mix: str, routes: dict[str, Route], prompt: LengthDist, output: LengthDist,
    tools_share: float, seed: int,
) -> FlagWorkload:
    """The workload of ``--mix`` and the length flags; every tier of the mix needs a route."""
    shares = parse_mix(mix)
    unknown = [t for t in shares if t not in routes]
    if unknown:
        raise WorkloadError(
            f"--mix: tier {unknown[0]!r} has no route; add --tier {unknown[0]}=MODEL[@PATH] "
            f"(known: {', '.join(routes)})"
        )
    return FlagWorkload(shares, prompt, output, tools_share, seed)


def _dist(d: LengthDist) -> dict[str, Any]:
    return {"kind": d.kind, "mean": d.mean}


@dataclass(frozen=True)
class BenchPlan:
    """One bench: the load, and either a flag workload or a trace, and how to judge it."""

    load: LoadConfig
    workload: FlagWorkload | None = None
    trace: list[RequestSpec] | None = None
    trace_path: str | None = None
    workers: int = 1
    slo_ttft: float | None = None  # goodput: TTFT at most this, seconds
    slo_tpot: float | None = None  # goodput: time per output token at most this, seconds
    prices: dict[str, Price] | None = None  # $/MTok per tier, else the server's usage.cost_usd
    price_table: str | None = None  # the table as given, for the JSON parameters
    compare_sim: bool = False
    sim_config: str | None = None  # the server's config file, for --compare-sim

    def __post_init__(self) -> None:
        if (self.workload is None) == (self.trace is None):
            raise ValueError("BenchPlan: give exactly one of workload and trace")
        if self.workers < 1:
            raise LoadError(f"--workers: must be >= 1, got {self.workers}")
        if self.trace is not None and self.compare_sim:
            raise LoadError("--trace: cannot be combined with --scenario or --compare-sim")

    @property
    def source(self) -> FlagWorkload | list[RequestSpec]:
        return self.workload if self.workload is not None else self.trace or []

    def params(self) -> dict[str, Any]:
        """Every parameter that shaped the run (``params`` in the JSON)."""
        out: dict[str, Any] = {**self.load.params(), "slo_ttft_s": self.slo_ttft,
                               "slo_tpot_s": self.slo_tpot, "price_table": self.price_table,
                               "workers": self.workers}
        wl = self.workload
        if wl is None:
            out["workload"] = {"trace": self.trace_path,
                               "requests_in_trace": len(self.trace or ())}
        else:
            out["workload"] = {"mix": wl.mix, "prompt_tokens": _dist(wl.prompt),
                               "output_tokens": _dist(wl.output), "tools_share": wl.tools_share}
        return out

    def title(self, with_mix: bool = True) -> str:
        """One line for plot titles: the load and the workload."""
        cfg = self.load
        load = (f"{cfg.rate:g} req/s {cfg.arrivals}" if cfg.rate else f"{cfg.concurrency} users" if cfg.concurrency
                else "trace replay")
        wl = self.workload
        if wl is not None:
            mix = ", ".join(f"{k} {100 * v:.0f}%" for k, v in wl.mix.items()) + "; "
            what = (f"{mix if with_mix else ''}prompt {wl.prompt.mean}, "
                    f"output {wl.output.mean} tok")
        else:
            what = f"trace {self.trace_path}"
        return f"{load}; {what}"


@dataclass(frozen=True)
class SimComparison:
    """``--compare-sim``: the simulator's arguments and answer, and the figures side by side."""

    simulate_args: list[str]
    rows: list[dict[str, Any]]
    simulated: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"simulate_args": self.simulate_args, "rows": self.rows,
                "simulated": self.simulated}


@dataclass
class BenchOutcome:
    doc: dict[str, Any]  # the JSON document (``--json``), JSON-safe
    run: RunResult
    title: str
    comparison: SimComparison | None = None

    def write_plots(self, directory: str | Path) -> list[Path]:
        from fastmode.clients.plots import write_plots

        return write_plots(self.run.results, directory, self.title)


@dataclass
class SweepOutcome:
    rows: list[dict[str, Any]]  # one per fast share: the figures of the table
    doc: dict[str, Any]  # the JSON document (``--json``), JSON-safe
    title: str
    points: list[dict[str, Any]] = field(default_factory=list)

    def write_plot(self, directory: str | Path) -> Path:
        from fastmode.clients.plots import plot_fast_share

        return plot_fast_share(self.rows, f"{directory}/fast_share.png",
                               f"Fast-share sweep at {self.title}")


def compare_with_simulator(plan: BenchPlan, summary: dict[str, Any]) -> SimComparison:
    """Run ``fastmode simulate`` on the plan's workload and line its figures up with ours."""
    from fastmode.clients.simcompare import compare, run_simulate, simulate_args

    assert plan.workload is not None
    cfg = plan.load
    sim_args = simulate_args(plan.workload, cfg.rate, cfg.concurrency, cfg.duration,
                             cfg.requests, cfg.arrivals, plan.sim_config)
    sim = run_simulate(sim_args)
    return SimComparison(sim_args, compare(summary, sim), sim)


def run_bench(plan: BenchPlan) -> BenchOutcome:
    """Send the load, compute the figures (and the simulator's, with ``compare_sim``)."""
    rr = execute(plan.load, plan.source, plan.workers)
    summary = summarise(
        rr.results, warmup=plan.load.warmup, cooldown=plan.load.cooldown, send_end=rr.send_end,
        slo_ttft=plan.slo_ttft, slo_tpot=plan.slo_tpot, prices=plan.prices,
    )
    comparison = compare_with_simulator(plan, summary) if plan.compare_sim else None
    doc = document(summary, plan.params(), rr.generator().as_dict(),
                   comparison.as_dict() if comparison is not None else None)
    return BenchOutcome(doc, rr, plan.title(), comparison)


def run_sweep(plan: BenchPlan, shares: Sequence[float]) -> SweepOutcome:
    """``--scenario fast-share``: the plan's load once per fast share."""
    if plan.workload is None:
        raise LoadError("--trace: cannot be combined with --scenario or --compare-sim")
    rows, points = run_fast_share(plan.load, plan.workload, shares, slo_ttft=plan.slo_ttft,
                                  slo_tpot=plan.slo_tpot, prices=plan.prices,
                                  workers=plan.workers)
    doc = {"fastmode_bench": SCHEMA_VERSION, "scenario": "fast-share", "params": plan.params(),
           "rows": rows, "points": points}
    return SweepOutcome(rows, json_safe(doc), plan.title(with_mix=False), points)
