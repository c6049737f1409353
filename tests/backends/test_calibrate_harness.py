"""The harness of a figure (fastmode/backends/calibrate/harness.py) and the two terms of an engine's
time to the first token: its runtime's (``request_overhead_ms``, every harness) and its API
server's (``serving_overhead_ms``, figures measured through a server only).

One ``request_overhead_ms`` per engine could not be both a server's first-token overhead and a
bare static benchmark's; with the harness a stated condition, a static-benchmark figure and a
serving figure of the same engine differ by the server's term, the runtime's term passes on
only from TTFTs taken in process, and the server's only from TTFTs taken through a server.
"""

from __future__ import annotations

import dataclasses

import pytest

from fastmode.backends.calibrate import (
    GPU_PRIOR,
    PRIORS,
    CalibrationError,
    EngineProfile,
    Figure,
    figure_from_dict,
    fit_pooled,
    load_published,
    predict_figure,
    predict_si,
    with_params,
)
from fastmode.backends.calibrate.engines import ENGINE_PRIORS, ENGINE_RELATIVES, inherit_engines
from fastmode.backends.calibrate.harness import harness_of, through_server
from fastmode.backends.calibrate.lineage import held_at_prior, informed_terms
from fastmode.backends.profiles import Catalog

CAT = Catalog.builtin()


def figure(i: int, *, engine: str = "X 1.0", scenario: str = "serving", metric: str = "ttft",
           batch: int = 1, prompt: int = 1000, conditions: str = "", harness: str = "",
           source: str = "s", hardware: str = "h100-sxm") -> Figure:
    unit = {"ttft": "s", "itl": "s", "e2e": "s", "throughput": "tok/s"}[metric]
    return Figure(id=f"f{i}", source=source, model="llama-3.1-8b", hardware=hardware, chips=1,
                  precision="bf16", scenario=scenario, batch=batch, prompt_tokens=prompt,
                  output_tokens=200, metric=metric, value=1.0, unit=unit, engine=engine,
                  conditions=conditions, harness=harness)


def test_the_harness_follows_from_the_stated_conditions() -> None:
    assert harness_of(figure(0, scenario="static")) == "static"
    assert harness_of(figure(1, conditions="offline maximum throughput: all queued")) \
        == "offline"
    assert harness_of(figure(2, engine="TensorRT-LLM v1.0 (PyTorch backend, trtllm-bench)")) \
        == "offline"
    assert harness_of(figure(3, conditions="closed loop at the given concurrency (AIPerf)")) \
        == "server"
    # a figure may state it, and then that is its harness
    assert harness_of(figure(4, conditions="offline", harness="server")) == "server"
    assert through_server(figure(5)) and not through_server(figure(6, scenario="static"))
    with pytest.raises(CalibrationError, match=r"figures\[0\]\.harness"):
        figure_from_dict({**dataclasses.asdict(figure(7)), "harness": "http"})


def test_each_published_source_has_the_harness_its_conditions_state() -> None:
    """The sources' harnesses, read off their conditions (a reworded condition that flips one
    fails here, not silently in the fit)."""
    _, figures = load_published()
    by_source: dict[str, set[str]] = {}
    for f in figures:
        by_source.setdefault(f.source, set()).add(harness_of(f))
    assert by_source["trtllm-perf"] == by_source["trtllm-perf-v08"] == {"static"}
    assert by_source["lmdeploy-a100"] == by_source["vllm-ci"] == {"static"}
    for offline in ("trtllm-perf-overview", "trtllm-perf-overview-v021",
                    "trtllm-perf-overview-v12", "trtllm-dsr1-best-perf"):
        assert by_source[offline] == {"offline"}, offline
    assert by_source["amd-perf-results-mi300x"] == {"static", "offline"}
    for served in ("nim-llama33-70b", "inferencemax-gptoss", "inferencemax-gptoss-mi355x",
                   "atom-ci-mi355x", "atom-recipe-qwen3-235b"):
        assert by_source[served] == {"server"}, served


def test_a_static_and_a_served_figure_of_one_engine_differ_by_its_server_term() -> None:
    engines = {"x": EngineProfile("x", ("X",), request_overhead_ms=1.5,
                                  serving_overhead_ms=20.0)}
    static = figure(0, scenario="static")
    offline = figure(1, conditions="offline run, all requests queued at once")
    served = figure(2)
    a, b, c = (predict_si(f, CAT, engines) for f in (static, offline, served))
    assert a is not None and b is not None and c is not None
    # the same single request, one step of 1,000 prompt tokens: the offline run and the
    # static batch pay the runtime's 1.5 ms, the served request the server's 20 ms on top
    assert c - b == pytest.approx(0.020, rel=1e-6)
    assert b == pytest.approx(a, rel=0.02)
    split = {"x": dataclasses.replace(engines["x"], request_overhead_ms=11.5,
                                      serving_overhead_ms=10.0)}
    assert predict_si(served, CAT, split) == pytest.approx(c)  # a served figure sees the sum
    assert predict_si(static, CAT, split) == pytest.approx(a + 0.010)  # a static one does not


def test_the_runtime_term_passes_on_from_in_process_ttfts_the_servers_from_served_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    engines = {
        "old": EngineProfile("old", ("Old",), request_overhead_ms=1.6, serving_overhead_ms=5.0),
        "srv": EngineProfile("srv", ("Srv",), request_overhead_ms=1.0, serving_overhead_ms=22.0),
        "e2e": EngineProfile("e2e", ("E2e",), request_overhead_ms=9.0),
        "new": EngineProfile("new", ("New",), request_overhead_ms=7.0, serving_overhead_ms=7.0),
    }
    figs = [figure(0, engine="Old 0.8", scenario="static"),
            figure(1, engine="Srv 2", hardware="b200"),
            figure(2, engine="E2e 1", scenario="static", metric="e2e")]
    informs, passes = informed_terms(figs, engines)
    assert "request_overhead_ms" in passes["old"] and "serving_overhead_ms" not in informs["old"]
    assert "serving_overhead_ms" in passes["srv"] and "request_overhead_ms" not in passes["srv"]
    # a served TTFT sees the runtime's and the server's terms together, an end-to-end latency
    # of seconds cannot tell a millisecond: the runtime's term stays at its prior there
    assert held_at_prior(figs, engines) == {"srv": frozenset({"request_overhead_ms"}),
                                            "e2e": frozenset({"request_overhead_ms"})}
    monkeypatch.setitem(ENGINE_RELATIVES, "new", ("e2e", "srv", "old"))
    out = inherit_engines(engines, informs, passes)["new"]
    # "e2e" is nearest but measured neither term; the server's comes from "srv", the
    # runtime's from the static benchmark of "old"
    assert out.serving_overhead_ms == 22.0 and out.request_overhead_ms == 1.6


def test_the_pooled_fit_puts_a_served_engines_overhead_in_its_server_term() -> None:
    """Served TTFTs made by the model with an engine whose server spends 20 ms: the fit, the
    runtime's term held at its 1 ms prior (served TTFTs cannot tell the two apart), finds the
    server's 20 ms."""
    h100 = with_params(CAT.get_hardware("h100-sxm"), {**PRIORS["h100-sxm"], **GPU_PRIOR})
    base = Catalog({**CAT.hardware, "h100-sxm": h100}, CAT.models)
    truth = {"e": EngineProfile("e", ("X",), request_overhead_ms=1.0, serving_overhead_ms=20.0,
                                serving_us_per_token=ENGINE_PRIORS["vllm"]["serving_us_per_token"])}
    made = []
    for i, (users, prompt, metric) in enumerate([(1, 100, "ttft"), (1, 500, "ttft"),
                                                  (4, 2000, "ttft"), (16, 1000, "itl")]):
        f = figure(i, batch=users, prompt=prompt, metric=metric, source=f"s{i % 2}")
        value = predict_figure(f, base, truth)
        assert value is not None
        made.append(dataclasses.replace(f, value=value))
    start = {"e": EngineProfile("e", ("X",)).with_values(ENGINE_PRIORS["vllm"])}
    assert start["e"].request_overhead_ms == 1.0 and start["e"].serving_overhead_ms == 5.0
    _, fitted = fit_pooled(made, base, engines=start, sweeps=3)
    assert fitted["e"].request_overhead_ms == 1.0
    assert fitted["e"].serving_overhead_ms == pytest.approx(20.0, rel=0.1)
