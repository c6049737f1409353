"""Host work an overlap scheduler hides under the GPU's step (``hidden_seq_us``): the step is
max(GPU, host), not their sum; an engine term measured on one system's host."""

from __future__ import annotations

import dataclasses

import pytest

from fastmode.backends.calibrate.engines import engines_from_toml, load_engines
from fastmode.backends.perf import Placement
from fastmode.backends.profiles import Catalog

CAT = Catalog.builtin()


def _place(hidden_us: float, model: str = "qwen3-30b-a3b", chips: int = 1,
           attention_dp: bool = False) -> Placement:
    hw = dataclasses.replace(CAT.get_hardware("b200"), hidden_seq_us=hidden_us)
    return Placement(CAT.get_model(model), hw, chips, "fp4", kv_precision="fp8",
                     attention_dp=attention_dp)


def test_the_host_is_a_floor_under_the_step_not_an_addition():
    batch, ctx = 1500, 1500 * 1536
    gpu = _place(0.0).step(batch, ctx)
    small = _place(1.0).step(batch, ctx)  # 1.5 ms of host work: hidden under the GPU's step
    assert small.total_s == pytest.approx(gpu.total_s)
    big = _place(60.0).step(batch, ctx)  # 90 ms: the host sets the step
    overhead = big.breakdown["overhead_s"]
    assert big.total_s == pytest.approx(max(gpu.total_s - overhead, 1500 * 60e-6) + overhead)
    assert big.total_s > gpu.total_s


def test_each_attention_dp_rank_runs_its_own_host_loop():
    ranks = 4
    one = _place(60.0, "qwen3-235b-a22b", ranks, attention_dp=True).step(4000, 4000 * 1500)
    host = 4000 / ranks * 60e-6
    assert one.total_s - one.breakdown["overhead_s"] == pytest.approx(
        max(host, _place(0.0, "qwen3-235b-a22b", ranks, attention_dp=True)
            .step(4000, 4000 * 1500).total_s - one.breakdown["overhead_s"]))


@pytest.mark.parametrize("hidden_us", [0.0, 60.0])
def test_decode_line_still_reproduces_the_step(hidden_us: float):
    """The virtual clock's linear form of a step (Placement.decode_line) holds with the host
    floor binding or not."""
    p = _place(hidden_us)
    for batch in (8, 600, 1500):
        w, c0, c1, k1, floor, fixed = p.decode_line(batch)
        for ctx in (batch * 100.0, batch * 1500.0):
            line = max(max(w, c0 + c1 * ctx) + k1 * ctx, floor) + fixed
            assert line == pytest.approx(p.step(batch, ctx).total_s)


def test_the_engine_term_applies_on_the_hardware_it_was_measured_on():
    trtllm, vllm = load_engines()["trtllm"], load_engines()["vllm"]
    assert trtllm.hidden_seq_us["gb200-nvl72"] == pytest.approx(45.11e3 / 1536, rel=1e-3)
    assert trtllm.hardware(CAT.get_hardware("gb200-nvl72")).hidden_seq_us > 0
    assert trtllm.hardware(CAT.get_hardware("b200")).hidden_seq_us == 0.0
    assert vllm.hardware(CAT.get_hardware("gb200-nvl72")).hidden_seq_us == 0.0
    text = '[engines.x]\nmatch = ["X"]\nhidden_seq_us = { "h200" = 12.5 }\n'
    assert engines_from_toml(text)["x"].hidden_seq_us == {"h200": 12.5}
