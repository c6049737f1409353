"""The collectives' bus-bandwidth share (``allreduce_bus_share``): a chip/fabric term of the
tensor-parallel all-reduce, with its prior from a published NCCL measurement."""

from __future__ import annotations

import dataclasses

import pytest

from fastmode.backends.calibrate.params import CHIP, NVLINK_BUS_SHARE, PARAMS, PRIORS
from fastmode.backends.perf import Placement
from fastmode.backends.profiles import Catalog, ProfileError
from fastmode.backends.step_terms import comm_seconds

CAT = Catalog.builtin()


def _place(share: float, chips: int = 8, attention_dp: bool = False) -> Placement:
    hw = dataclasses.replace(CAT.get_hardware("h200"), allreduce_bus_share=share)
    return Placement(CAT.get_model("llama-3.1-70b"), hw, chips, "fp8",
                     attention_dp=attention_dp)


@pytest.mark.parametrize("attention_dp", [False, True])
def test_only_the_data_term_scales_with_the_share(attention_dp: bool):
    """The bytes on the wire take 1 / share as long; the fixed latency does not move."""
    tokens = 2048
    full, _ = comm_seconds(_place(1.0, attention_dp=attention_dp), tokens)
    half, _ = comm_seconds(_place(0.5, attention_dp=attention_dp), tokens)
    hw = CAT.get_hardware("h200")
    m = CAT.get_model("llama-3.1-70b")
    latencies = 2 * m.layers * hw.interconnect_latency_us * 1e-6  # two per layer either way
    assert half - latencies == pytest.approx(2 * (full - latencies))
    assert comm_seconds(_place(0.5, chips=1), tokens) == (0.0, 0.0)


def test_a_smaller_share_slows_a_tp8_step_and_leaves_one_chip_alone():
    assert _place(0.8).step(512, 512 * 2000).total_s > _place(1.0).step(512, 512 * 2000).total_s
    one = dataclasses.replace(CAT.get_hardware("h200"), allreduce_bus_share=0.5)
    solo = Placement(CAT.get_model("llama-3.1-8b"), one, 1, "fp8")
    ref = Placement(CAT.get_model("llama-3.1-8b"), CAT.get_hardware("h200"), 1, "fp8")
    assert solo.step(64, 64 * 1000).total_s == ref.step(64, 64 * 1000).total_s


def test_the_share_is_a_fitted_chip_term_with_the_measured_prior():
    """NVLink chips start at NCCL's 370 of 450 GB/s; chips no source measured at the line
    rate (the model before the term)."""
    assert "allreduce_bus_share" in CHIP
    assert NVLINK_BUS_SHARE == pytest.approx(370 / 450)
    for name in ("a100-80g", "h100-sxm", "h200", "gh200", "b200", "gb200-nvl72"):
        assert PRIORS[name]["allreduce_bus_share"] == NVLINK_BUS_SHARE
    for name in ("mi300x", "mi355x", "wse-3"):
        assert PRIORS[name]["allreduce_bus_share"] == 1.0
    p = PARAMS["allreduce_bus_share"]
    assert p.lo < NVLINK_BUS_SHARE < 1.0 < p.hi


def test_a_profile_with_no_bus_bandwidth_is_refused():
    raw = {k: v for k, v in dataclasses.asdict(CAT.get_hardware("h200")).items() if k != "name"}
    with pytest.raises(ProfileError, match="allreduce_bus_share"):
        Catalog.builtin().extend({"x": {**raw, "allreduce_bus_share": 0.0}}, None)
