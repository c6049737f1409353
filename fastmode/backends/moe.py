"""Mixture-of-experts arithmetic for one engine step: which experts a step touches, how the
work falls on the chips, and what small groups of tokens per expert cost. Pure functions.

- **Touched experts.** T tokens each route to k of E experts; with uniform routing the
  expected share of experts touched is ``1 - (1 - k/E)^T`` (``touched_expert_share``): one
  token reads about its active parameters, a few hundred read the whole model. A router
  that prefers some experts touches fewer (``expert_skew``, the profile's
  ``expert_load_cv2``).
- **Few tokens per expert.** A grouped GEMM pays at least a tile of rows for every expert it
  runs (``expert_rows``): at decode a DeepSeek-V3 step of 64 tokens sends ~2 tokens to each of
  ~220 experts, and each costs a tile, not 2 rows.
- **Expert parallelism and load imbalance.** With experts spread over ``ep`` groups of chips
  (expert parallelism), each group reads and multiplies only its own experts, and the step
  waits for the busiest group. The expected maximum of ``ep`` roughly normal loads is the mean
  plus ``sqrt(2 ln ep)`` standard deviations (``expected_max``): the busiest of 8 groups holds
  ~2 sigma more touched experts than the mean at small batches, and more tokens at any batch.
  With tensor-parallel experts every chip holds a slice of every expert: no imbalance.
"""

from __future__ import annotations

import math

from fastmode.backends.expert_skew import skewed_touched_share


def touched_expert_share(experts: int, per_token: int, tokens: float, cv2: float = 0.0) -> float:
    """Expected share of ``experts`` touched by ``tokens`` tokens routing to ``per_token``
    (``cv2``: the spread of the experts' popularity, ``expert_skew``; 0 = uniform)."""
    return skewed_touched_share(experts, per_token, tokens, cv2)


def expected_max(mean: float, variance: float, groups: int) -> float:
    """Expected maximum over ``groups`` loads of this mean and variance (normal
    approximation, ``sqrt(2 ln n)`` standard deviations above the mean), never above
    ``groups * mean`` (one group holding everything)."""
    if groups <= 1 or mean <= 0:
        return mean
    top = mean + math.sqrt(max(0.0, variance)) * math.sqrt(2.0 * math.log(groups))
    return min(top, mean * groups)


def busiest_group_experts(experts: int, per_token: int, tokens: float, groups: int,
                          cv2: float = 0.0) -> float:
    """Touched experts on the busiest of ``groups`` expert-parallel groups (E / groups experts
    each), expected."""
    share = touched_expert_share(experts, per_token, tokens, cv2)
    local = experts / max(1, groups)
    return expected_max(local * share, local * share * (1.0 - share), groups)


def busiest_group_tokens(per_token: int, tokens: float, groups: int) -> float:
    """Token-expert assignments of the busiest of ``groups`` groups, expected (each of the
    T * k assignments lands in a group uniformly: binomial)."""
    n = tokens * per_token
    p = 1.0 / max(1, groups)
    return expected_max(n * p, n * p * (1.0 - p), groups)


def expert_rows(experts: int, per_token: int, tokens: float, tile: float,
                cv2: float = 0.0) -> tuple[float, float]:
    """(rows the grouped GEMMs pay for, rows per touched expert) of a step of ``tokens``
    tokens: every touched expert costs at least ``tile`` rows."""
    if experts <= 0 or tokens <= 0:
        return 0.0, 0.0
    touched = experts * touched_expert_share(experts, per_token, tokens, cv2)
    per_expert = tokens * per_token / touched
    return touched * max(per_expert, tile), max(per_expert, tile)


__all__ = ["busiest_group_experts", "busiest_group_tokens", "expected_max", "expert_rows",
           "touched_expert_share"]
