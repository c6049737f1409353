"""4-bit weights on a chip without 4-bit tensor cores: dequantising GEMMs (fastmode/backends/dequant.py).

Modeled step times only (no clock): which placements take the W4A16 path, and that its GEMMs
run at a flat share of the bf16 peak -- the dequantising loop binds a prefill chunk, the 4-bit
weight read a decode batch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fastmode.backends.calibrate.figures import Figure
from fastmode.backends.calibrate.fit import _relevance_groups
from fastmode.backends.calibrate.params import W4A16_PRIOR
from fastmode.backends.dequant import dequantises, w4a16_flops
from fastmode.backends.perf import Placement, prefill_attention_context
from fastmode.backends.profiles import Catalog

CAT = Catalog.builtin()
OSS = CAT.get_model("gpt-oss-120b")


def _on(hw_name: str, chips: int = 8, **changes: Any) -> Placement:
    hw = replace(CAT.get_hardware(hw_name), **changes)
    return Placement(OSS, hw, chips, "mxfp4")


def test_only_four_bit_weights_on_chips_without_fp4_tensor_cores_dequantise() -> None:
    h100, b200, mi355x = (CAT.get_hardware(n) for n in ("h100-sxm", "b200", "mi355x"))
    assert dequantises(h100, "mxfp4") and dequantises(h100, "fp4")
    assert not dequantises(b200, "mxfp4") and not dequantises(mi355x, "mxfp4")
    assert not dequantises(h100, "fp8") and not dequantises(h100, "bf16")
    assert w4a16_flops(h100) == pytest.approx(989e12 * h100.w4a16_efficiency)


def _prefill(p: Placement, tokens: int = 7373) -> dict[str, float]:
    return p.step(0, 0.0, tokens, prefill_attention_context(tokens, 0)).breakdown


def test_a_prefill_chunk_of_dequantised_experts_is_bound_by_the_dequantising_loop() -> None:
    # the expert GEMMs' time scales as 1 / w4a16_efficiency: halving it adds exactly the
    # expert part's time again (the bf16 attention GEMMs and the LM head do not move)
    full = _prefill(_on("h100-sxm", w4a16_efficiency=0.5))["compute_s"]
    half = _prefill(_on("h100-sxm", w4a16_efficiency=0.25))["compute_s"]
    dense = _prefill(_on("h100-sxm", w4a16_efficiency=1e9))["compute_s"]  # experts ~free
    assert half - dense == pytest.approx(2 * (full - dense), rel=1e-9)
    # at the prior, the experts of an 8K chunk cost more than on the bf16 ramp's rate
    ramp = _prefill(_on("h100-sxm", w4a16_efficiency=CAT.get_hardware("h100-sxm").mfu))
    assert _prefill(_on("h100-sxm"))["compute_s"] > 2 * ramp["compute_s"]


def test_a_decode_batch_of_dequantised_experts_reads_its_weights_slower_than_it_computes() -> None:
    # at the prior, with a 16-row tile: the read of the 4-bit experts binds, not their math
    for batch in (1, 8, 64):
        p = _on("h200", chips=2, w4a16_efficiency=W4A16_PRIOR, gemm_min_tokens=16.0)
        b = p.step(batch, batch * 1500.0).breakdown
        assert b["weights_s"] > b["compute_s"], batch


def test_a_chip_with_fp4_tensor_cores_ignores_the_term() -> None:
    a = _prefill(_on("b200", chips=2, w4a16_efficiency=0.05))
    b = _prefill(_on("b200", chips=2, w4a16_efficiency=0.9))
    assert a == b


def test_the_fit_moves_the_term_only_for_figures_that_dequantise() -> None:
    def fig(hw: str, precision: str) -> Figure:
        return Figure(id=f"x/{hw}/{precision}", source="x", model="gpt-oss-120b", hardware=hw,
                      chips=2, precision=precision, scenario="static", batch=1,
                      prompt_tokens=128, output_tokens=2, metric="ttft", value=0.01, unit="s")
    groups = _relevance_groups([fig("h100-sxm", "mxfp4"), fig("b200", "mxfp4")], CAT, {})
    relevant = {key[1]: names for key, (_, names) in groups.items()}
    assert "w4a16_efficiency" in relevant["w4a16"]
    assert "w4a16_efficiency" not in relevant["fp8"]
