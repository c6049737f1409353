"""bench/score_figures.py scores chosen figures with the shipped profiles, as the calibration
does, and rescores them under one changed condition or term (docs/calibration.md, "Issue 24:
the v1.2 MoE rows, diagnosed")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from backends.calibrate import figures as figmod
from backends.calibrate import load_published
from backends.calibrate.figures import load_figures, predict_figure
from backends.profiles import Catalog
from bench.score_figures import main

ROWS = "trtllm-perf-overview-v12/qwen3-30b-a3b/b200x1/serving-b3000-1024-1024"
TP8 = Path(__file__).resolve().parents[2] / "bench" / "data" / "v017_tp8_70b.toml"


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


def test_the_tp8_rows_are_kept_out_of_the_calibration_set() -> None:
    _, extra = load_figures(TP8.read_text("utf-8"))
    _, figs = load_published()
    assert len(extra) == 12 and all(f.chips == 8 for f in extra)
    assert not {f.id for f in extra} & {f.id for f in figs}
