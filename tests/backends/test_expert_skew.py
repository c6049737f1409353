"""Skewed routing (fastmode/backends/expert_skew.py): a router that prefers some experts touches fewer
distinct experts per step, so an MoE decode step reads fewer expert weights.

Modeled values only: the closed form against a direct expectation over a Gamma spread of
popularity, its limits, and what it does to a placement's step.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastmode.backends.calibrate.figures import Figure
from fastmode.backends.calibrate.fit import _relevance_groups
from fastmode.backends.calibrate.params import (
    EXPERT_LOAD_CV2_PRIOR,
    PRIORS,
    ROUTING_SKEW_IN_FIT,
    SHARED,
)
from fastmode.backends.expert_skew import skewed_touched_share
from fastmode.backends.moe import busiest_group_experts, expert_rows, touched_expert_share
from fastmode.backends.perf import Placement
from fastmode.backends.profiles import Catalog

CAT = Catalog.builtin()


@given(st.integers(2, 512), st.integers(1, 16), st.floats(0.0, 5000.0))
def test_no_spread_is_uniform_routing(experts: int, k: int, tokens: float) -> None:
    k = min(k, experts - 1)
    uniform = 1.0 - (1.0 - k / experts) ** tokens
    assert skewed_touched_share(experts, k, tokens, 0.0) == pytest.approx(uniform)
    # a vanishing spread tends to the uniform formula
    assert skewed_touched_share(experts, k, tokens, 1e-7) == pytest.approx(uniform, abs=1e-5)


@given(st.integers(2, 512), st.integers(1, 16), st.integers(1, 5000),
       st.floats(0.01, 8.0), st.floats(0.01, 8.0))
def test_a_wider_spread_touches_fewer_experts(experts: int, k: int, tokens: int,
                                              a: float, b: float) -> None:
    k = min(k, experts - 1)
    lo, hi = sorted((a, b))
    wide = skewed_touched_share(experts, k, tokens, hi)
    narrow = skewed_touched_share(experts, k, tokens, lo)
    assert 0.0 < wide <= narrow <= skewed_touched_share(experts, k, tokens, 0.0) + 1e-12
    # more tokens never touch fewer experts
    assert skewed_touched_share(experts, k, tokens + 1, hi) >= wide


def test_the_closed_form_is_the_expectation_over_a_gamma_spread_of_popularity() -> None:
    # E_g[(1 - k/E)^(T g)] for g ~ Gamma(shape 1/cv2, mean 1), by quadrature of the density
    experts, k, tokens, cv2 = 128, 4, 32, 0.8
    shape = 1.0 / cv2
    q = -math.log1p(-k / experts)
    n, top = 200_000, 40.0
    dx = top / n
    untouched = 0.0
    for i in range(n):
        g = (i + 0.5) * dx
        dens = g ** (shape - 1) * math.exp(-g * shape) * shape ** shape / math.gamma(shape)
        untouched += dens * math.exp(-q * tokens * g) * dx
    assert skewed_touched_share(experts, k, tokens, cv2) == pytest.approx(1 - untouched,
                                                                         rel=1e-4)


def test_one_token_still_touches_about_its_own_experts_and_very_many_touch_all() -> None:
    # at T = 1 the share is ~k/E whatever the spread (a token picks k experts); at T -> inf, 1
    for cv2 in (0.0, 0.5, 2.0):
        assert skewed_touched_share(256, 8, 1, cv2) == pytest.approx(8 / 256, rel=0.05)
        assert skewed_touched_share(256, 8, 1e9, cv2) == pytest.approx(1.0, abs=1e-3)


def test_the_moe_helpers_pass_the_spread_on() -> None:
    assert touched_expert_share(128, 4, 32, 1.0) == skewed_touched_share(128, 4, 32, 1.0)
    assert touched_expert_share(128, 4, 32, 1.0) < touched_expert_share(128, 4, 32)
    assert busiest_group_experts(256, 8, 64, 8, 1.0) < busiest_group_experts(256, 8, 64, 8)
    rows_skew, per_skew = expert_rows(128, 4, 32, 16.0, 1.0)
    rows_uni, per_uni = expert_rows(128, 4, 32, 16.0)
    assert rows_skew < rows_uni and per_skew >= per_uni  # fewer experts, more rows each


def test_a_decode_step_of_a_skewed_router_reads_fewer_expert_weights() -> None:
    oss = CAT.get_model("gpt-oss-120b")
    hw = CAT.get_hardware("b200")
    uniform = Placement(oss, replace(hw, expert_load_cv2=0.0), 1, "mxfp4")
    skewed = Placement(oss, replace(hw, expert_load_cv2=1.0), 1, "mxfp4")
    # one token: the same reads; 32 decoding sequences: fewer with the skewed router
    assert skewed.weight_bytes_read(1) == pytest.approx(uniform.weight_bytes_read(1), rel=0.02)
    assert skewed.weight_bytes_read(32) < 0.9 * uniform.weight_bytes_read(32)
    t_uni = uniform.step(32, 32 * 1500.0).breakdown["weights_s"]
    t_skew = skewed.step(32, 32 * 1500.0).breakdown["weights_s"]
    assert t_skew < t_uni
    # a dense model does not care
    dense = CAT.get_model("llama-3.1-8b")
    a = Placement(dense, replace(hw, expert_load_cv2=0.0), 1, "fp8").step(32, 48000.0)
    b = Placement(dense, replace(hw, expert_load_cv2=3.0), 1, "fp8").step(32, 48000.0)
    assert a.total_s == b.total_s


def _gini(cv2: float) -> float:
    """Gini coefficient of a Gamma law of shape 1 / cv2 (the prior's source states a Gini)."""
    a = 1.0 / cv2
    return math.exp(math.lgamma(a + 0.5) - math.lgamma(a)) / (a * math.sqrt(math.pi))


def test_the_prior_is_the_spread_of_the_measured_gini() -> None:
    # the Gamma spread whose Gini is 0.30 (the low end of the measured mock-token band)
    assert _gini(EXPERT_LOAD_CV2_PRIOR) == pytest.approx(0.30, abs=0.005)
    assert _gini(1.0) == pytest.approx(0.5)  # an exponential spread


def test_the_shipped_fit_keeps_uniform_routing_unless_the_term_is_switched_on() -> None:
    # a refit measured the term but did not adopt it (docs/notes/calibration.md):
    # every prior and profile is uniform routing, so the shipped fit and its cross-validation
    # are the ones documented; switched on, it is a shared term that starts at its prior
    in_fit = "expert_load_cv2" in SHARED
    assert in_fit == ROUTING_SKEW_IN_FIT
    for prior in PRIORS.values():
        assert prior.get("expert_load_cv2", 0.0) == (EXPERT_LOAD_CV2_PRIOR if in_fit else 0.0)
    if not in_fit:
        assert all(hw.expert_load_cv2 == 0.0 for hw in CAT.hardware.values())
        common = dict(source="s", hardware="b200", chips=1, scenario="serving", batch=16,
                      prompt_tokens=1024, output_tokens=1024, metric="itl", value=5.0,
                      unit="ms", engine="vLLM 0.11.2")
        moe = Figure(id="a", model="gpt-oss-120b", precision="mxfp4", **common)  # type: ignore[arg-type]
        ((_, names),) = _relevance_groups([moe], CAT, {}).values()
        assert "expert_load_cv2" not in names
