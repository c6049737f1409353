"""bench/score_figures.py scores chosen figures with the shipped profiles, as the calibration
does, and rescores them under one changed condition or term (docs/calibration.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.score_figures import main
from fastmode.backends.calibrate import figures as figmod
from fastmode.backends.calibrate import load_published
from fastmode.backends.calibrate.figures import predict_figure
from fastmode.backends.profiles import Catalog

ROWS = "trtllm-perf-overview-v12/qwen3-30b-a3b/b200x1/serving-b3000-1024-1024"


def _printed(out: str) -> dict[str, float]:
    """figure id -> predicted value, from the script's table."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[3].startswith(("trtllm", "v0")):
            rows[parts[3]] = float(parts[1])
    return rows


def test_it_prints_the_calibrations_own_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--source", "trtllm-perf-overview-v12", "--breakdown"]) == 0
    printed = _printed(capsys.readouterr().out)
    _, figs = load_published()
    cat = Catalog.builtin()
    v12 = [f for f in figs if f.source == "trtllm-perf-overview-v12"]
    assert len(printed) == len(v12)
    for f in v12:
        assert printed[f.id] == pytest.approx(predict_figure(f, cat), rel=1e-3)


def test_a_changed_condition_is_scored_and_nothing_leaks(capsys: pytest.CaptureFixture[str]) -> None:
    placement = figmod.placement
    main(["--match", ROWS])
    fp8 = _printed(capsys.readouterr().out)
    main(["--match", ROWS, "--set", "fig.kv_precision=bf16"])
    bf16 = _printed(capsys.readouterr().out)
    main(["--match", ROWS, "--set", "hw.expert_compute_efficiency=0.5"])
    slow = _printed(capsys.readouterr().out)
    (fid,) = fp8
    # twice the KV bytes per token: half the batch fits, and this KV-read-bound run is slower
    _, figs = load_published()
    fig = next(f for f in figs if f.id == fid)
    expect = predict_figure(dataclasses.replace(fig, kv_precision="bf16"), Catalog.builtin())
    assert bf16[fid] == pytest.approx(expect, rel=1e-3)
    assert bf16[fid] < fp8[fid]
    assert slow[fid] < fp8[fid]  # slower grouped GEMMs: a slower step
    assert figmod.placement is placement  # the hardware override is undone


def test_the_tp8_rows_are_in_the_set_and_an_extra_file_is_scored_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The all-reduce term put the v0.17 page's 70B TP 8 rows into the set; a file of
    figures outside it (--extra) is still scored exactly as the set's own figures are."""
    _, figs = load_published()
    tp8 = [f for f in figs if f.source == "trtllm-perf-overview-v017" and f.chips == 8]
    assert len(tp8) == 12 and {f.hardware for f in tp8} == {"h100-sxm", "h200"}
    twin = next(f for f in tp8 if f.hardware == "h200" and f.output_tokens == 2048)
    fid = "trtllm-x/llama-3.1-70b/h200x8/serving-b3000-128-2048/throughput"
    fields = {"id": fid,
              "source": "trtllm-x", "where": "a copy", "conditions": twin.conditions,
              "engine": twin.engine, "model": twin.model, "hardware": twin.hardware,
              "precision": twin.precision, "kv_precision": twin.kv_precision,
              "scenario": twin.scenario, "metric": twin.metric, "unit": "tok/s"}
    nums = {"chips": twin.chips, "batch": twin.batch, "requests": twin.requests,
            "prompt_tokens": twin.prompt_tokens, "output_tokens": twin.output_tokens,
            "max_batch": twin.max_batch, "value": twin.value}
    lines = ['[sources.trtllm-x]', 'title = "t"', 'url = "https://example.org"',
             'publisher = "p"', "", "[[figures]]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in fields.items()]  # a TOML basic string
    lines += [f"{k} = {v}" for k, v in nums.items()]
    extra = tmp_path / "extra.toml"
    extra.write_text("\n".join(lines) + "\n", "utf-8")
    assert main(["--extra", str(extra)]) == 0
    printed = _printed(capsys.readouterr().out)
    assert printed[fid] == pytest.approx(predict_figure(twin, Catalog.builtin()), rel=1e-3)
