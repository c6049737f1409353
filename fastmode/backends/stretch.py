"""Steady stretches of decode steps in closed form, for the virtual clock.

While no prompt is being prefilled and nothing can join the batch, a replica's steps differ only
by their growing context, and each lasts ``max(w + k1 x, c0 + (c1 + k1) x, floor) + fixed`` with
the context ``x`` growing by the batch size each step (``Placement.decode_line``): the upper
envelope of three lines in the step number, convex and piecewise linear. Each piece sums as an
arithmetic series, so a stretch of any length (to the first finish, or to the next outside
event) costs a few float operations instead of one loop turn per step.
"""

from __future__ import annotations

import math


def stretch(
    line: tuple[float, ...], ctx: float, n: int, steps_left: int, budget: float
) -> tuple[int, float, float, float]:
    """A stretch of decode steps in closed form: (steps, their total time, first and last step).

    Step j of the stretch lasts ``max(w + k1 x, c0 + (c1 + k1) x, floor) + fixed`` with the
    context ``x = ctx + n j`` (``Placement.decode_line``): the upper envelope of three lines in j,
    convex and piecewise linear, so each piece sums as an arithmetic series. The stretch runs
    ``steps_left`` steps, or stops after the first step that takes the total to ``budget`` (the
    time until the next event), exactly as stepping one by one would: O(1) instead of O(steps).
    """
    w, c0, c1, k1, floor, fixed = line
    if c1 == 0.0 and steps_left > 0:  # the usual case: one roof line and the floor
        a = (w if w > c0 else c0) + k1 * ctx
        b = k1 * n
        if a >= floor or b == 0.0:
            first = (a if a > floor else floor) + fixed
            slope = b if a >= floor else 0.0
            m = steps_left
            total = m * first + slope * m * (m - 1) / 2
            if total >= budget:
                m = _crossing(first, slope, budget, m)
                total = m * first + slope * m * (m - 1) / 2
            return m, total, first, first + slope * (m - 1)
    lines = ((w + k1 * ctx, k1 * n), (c0 + (c1 + k1) * ctx, (c1 + k1) * n), (floor, 0.0))

    def dt_at(j: int) -> float:
        return max(a + b * j for a, b in lines) + fixed

    total, j = 0.0, 0
    while j < steps_left:
        a, b = max(lines, key=lambda ln: (ln[0] + ln[1] * j, ln[1]))  # the piece at step j
        end = steps_left
        for ai, bi in lines:
            if bi > b:  # a steeper line overtakes after j*: from step floor(j*) + 1 on
                jstar = (a - ai) / (bi - b)
                if jstar < end:
                    end = min(end, max(j + 1, math.floor(jstar) + 1))
        first = a + fixed + b * j  # this piece's first step
        count = end - j
        piece = count * first + b * count * (count - 1) / 2
        if total + piece < budget:
            total += piece
            j = end
            continue
        t = _crossing(first, b, budget - total, count)
        total += t * first + b * t * (t - 1) / 2
        j += t
        break
    steps = max(j, 1) if steps_left > 0 else 0
    if not steps:
        return 0, 0.0, 0.0, 0.0
    return steps, total, dt_at(0), dt_at(steps - 1)


def _crossing(first: float, b: float, rem: float, count: int) -> int:
    """The smallest t in [1, count] with ``t * first + b t(t-1)/2 >= rem`` (steps of an
    arithmetic series until a time budget is reached), else ``count``."""
    if b > 0:
        half = first - b / 2
        t = math.ceil((-half + math.sqrt(half * half + 2 * b * max(rem, 0.0))) / b)
    else:
        t = math.ceil(rem / first) if first > 0 else 1
    t = min(max(t, 1), count)
    while t > 1 and (t - 1) * first + b * (t - 1) * (t - 2) / 2 >= rem:
        t -= 1
    while t < count and t * first + b * t * (t - 1) / 2 < rem:
        t += 1
    return t
