"""Skewed routing: how many distinct experts a step's tokens touch when the router does not
pick experts uniformly.

``moe.touched_expert_share`` assumed every expert equally likely: T tokens each routing to k of
E experts touch ``1 - (1 - k/E)^T`` of them. Trained routers are not uniform: over a batch some
experts are picked several times as often as others (the reason DeepSeek-V3 ships an
expert-parallel load balancer, EPLB, and TensorRT-LLM and SGLang replicate hot experts), so
the same T tokens land on fewer distinct experts, and a decode step at a few dozen sequences
reads fewer expert weights than uniform routing says. The uniform model made every MoE decode
step's expert reads grow too fast with the batch: the fit ran ``expert_read_efficiency`` to
its ceiling (1.0) and still predicted gpt-oss's ITL at 16-64 users 10-36% too slow while it was
right at 1-4 (docs/notes/calibration.md).

The model: each expert's probability of being picked by a token is ``(k/E) * g`` with ``g``
drawn from a Gamma distribution of mean 1 and squared coefficient of variation ``cv2`` (a
standard way to describe a spread of rates; cv2 = 0 is uniform). An expert is left untouched
by T tokens with probability E_g[(1 - k/E)^(T g)] = (1 + cv2 * T * q)^(-1 / cv2), where
q = -ln(1 - k/E) (the Laplace transform of the Gamma law), so the touched share is
``1 - (1 + cv2 * T * q)^(-1/cv2)``: exactly the uniform formula at cv2 = 0, lower at every T
otherwise, and still 1 at very large T. One number for the router (``cv2``,
``HardwareProfile.expert_load_cv2``: a shared term fitted over every MoE figure of the set,
not per chip; it lives on the hardware profile beside the other shared kernel terms).
"""

from __future__ import annotations

import math


def skewed_touched_share(experts: int, per_token: int, tokens: float, cv2: float) -> float:
    """Expected share of ``experts`` touched by ``tokens`` tokens, each routing to
    ``per_token`` of them, when the experts' popularity varies with squared coefficient of
    variation ``cv2`` (0: uniform routing)."""
    if experts <= 0:
        return 1.0
    t = max(0.0, tokens)
    p = min(1.0, per_token / experts)
    if p >= 1.0:
        return 1.0 if t > 0 else 0.0
    if cv2 <= 0.0:
        return 1.0 - math.pow(1.0 - p, t)
    q = -math.log1p(-p)
    return 1.0 - math.pow(1.0 + cv2 * t * q, -1.0 / cv2)


__all__ = ["skewed_touched_share"]
