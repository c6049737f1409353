"""A fit's fallbacks for what its figures do not measure (fastmode/backends/calibrate/lineage.py).

Inside a cross-validation fold that holds out an engine's or a GPU's only source, the engine
takes the fitted terms of the engine it derives from and the GPU its nearest measured
sibling's chip values, instead of hand priors or the pooled GPU values; nothing of the
held-out figures is used.
"""

from __future__ import annotations

import dataclasses

import pytest

from fastmode.backends.calibrate import Figure, fit, predict_figure, prior_catalog
from fastmode.backends.calibrate.engines import EngineProfile, ancestors, inherit_engines
from fastmode.backends.calibrate.lineage import informed_terms, measured_sibling
from fastmode.backends.calibrate.params import CHIP, CHIP_EFFICIENCIES
from fastmode.backends.profiles import Catalog

CAT = Catalog.builtin()


def figure(i: int, *, engine: str, hardware: str, metric: str = "itl",
           scenario: str = "serving", source: str = "s") -> Figure:
    unit = {"ttft": "s", "itl": "s", "e2e": "s", "throughput": "tok/s"}[metric]
    return Figure(id=f"f{i}", source=source, model="llama-3.1-8b", hardware=hardware, chips=1,
                  precision="bf16", scenario=scenario, batch=4, prompt_tokens=500,
                  output_tokens=200, metric=metric, value=1.0, unit=unit, engine=engine)


def test_an_engines_relatives_are_its_code_lineage_nearest_first():
    assert ancestors("atom") == ["atom-2026", "vllm-rocm", "vllm"]
    assert ancestors("trtllm-xqa")[0] == "trtllm-pre-xqa"  # the runtime it added XQA to
    assert "atom" not in ancestors("atom")
    assert ancestors("lmdeploy") == []


def test_an_unmeasured_engine_takes_what_its_ancestors_measured():
    engines = {  # the first profile that covers a figure's engine is its engine
        "vllm-rocm": EngineProfile("vllm-rocm", ("vLLM (ROCm",), request_overhead_ms=5.0,
                                   step_overhead_ms=1.8, compute_scale=0.5),
        "vllm": EngineProfile("vllm", ("vLLM",), request_overhead_ms=1.0, step_overhead_ms=0.9,
                              compute_scale=1.0, serving_overhead_ms=21.0),
        "atom": EngineProfile("atom", ("ATOM",), gqa_reread=0.3),
    }
    # vLLM-ROCm measured by a static batch on one chip: its host work passes on, its time to
    # the first token (an end-to-end latency of seconds cannot tell it) and its kernel scales
    # (one chip: not told apart from the chip's efficiencies) do not; vLLM's serving figures
    # pass everything but the runtime's time to the first token (a served TTFT sees it only
    # together with the API server's)
    figs = [figure(0, engine="vLLM (ROCm, 2024)", hardware="mi300x", metric="e2e",
                   scenario="static"),
            figure(1, engine="vLLM 0.11", hardware="h100-sxm", metric="ttft"),
            figure(2, engine="vLLM 0.11", hardware="h200")]
    informs, passes = informed_terms(figs, engines)
    assert "request_overhead_ms" in informs["vllm-rocm"]
    assert not {"request_overhead_ms", "compute_scale"} & passes["vllm-rocm"]
    assert {"serving_overhead_ms", "compute_scale"} <= passes["vllm"]
    assert "request_overhead_ms" not in passes["vllm"]
    assert "atom" not in informs
    out = inherit_engines(engines, informs, passes)
    atom = out["atom"]
    assert atom.step_overhead_ms == 1.8  # the nearest ancestor that measured it
    assert atom.serving_overhead_ms == 21.0 and atom.compute_scale == 1.0  # from vLLM
    assert atom.request_overhead_ms == 5.0  # no relative measured it in process: its own
    assert atom.gqa_reread == 0.3  # a kernel's own property: never inherited
    # a measured engine keeps what its own figures inform
    assert out["vllm-rocm"].compute_scale == 0.5 and out["vllm-rocm"].request_overhead_ms == 5.0


def test_a_gpu_without_figures_takes_its_measured_siblings_chip_values():
    figs = [figure(0, engine="measured", hardware="mi300x")]
    assert measured_sibling("mi355x", figs) == "mi300x"
    assert measured_sibling("mi325x", figs) == "mi300x"
    assert measured_sibling("b300", figs) is None  # no Blackwell measured: the pooled values
    # figures of a slower MI300X (half the bandwidth efficiency of its prior), made by the model
    base = prior_catalog(CAT)
    mi300x = base.get_hardware("mi300x")
    slow = Catalog({**base.hardware, "mi300x": dataclasses.replace(mi300x, mbu=0.3)},
                   base.models)
    made = []
    for i, (batch, metric) in enumerate([(1, "itl"), (8, "itl"), (32, "throughput")]):
        f = dataclasses.replace(figure(i, engine="measured", hardware="mi300x", metric=metric),
                                batch=batch, source=f"s{i}")
        value = predict_figure(f, slow)
        assert value is not None
        made.append(dataclasses.replace(f, value=value))
    fitted = fit(made, base, hardware={"mi300x", "mi355x", "b300"}, sweeps=2)
    theirs, mine = fitted.hardware["mi300x"].values, fitted.hardware["mi355x"].values
    assert theirs["mbu"] < 0.45  # the fit found the slow chip...
    assert {k: mine[k] for k in CHIP_EFFICIENCIES + CHIP} == pytest.approx(
        {k: theirs[k] for k in CHIP_EFFICIENCIES + CHIP})  # ...and its sibling follows it
    assert fitted.hardware["b300"].values["mbu"] != pytest.approx(theirs["mbu"])
