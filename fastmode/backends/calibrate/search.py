"""The minimiser the fits use: a coordinate search, one parameter at a time by golden-section
search over its (log) range. Deterministic, no gradients, no scipy."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from fastmode.backends.calibrate.params import ENGINE_SPECS, PARAMS, Param


def param(name: str) -> Param:
    """The Param of a fitted name: a profile field, or ``ENGINE/field`` for an engine's."""
    if "/" in name:
        return ENGINE_SPECS[name.rsplit("/", 1)[-1]]
    return PARAMS[name]


def _golden(fn: Callable[[float], float], a: float, b: float, tol: float) -> float:
    """Minimum of a unimodal-ish function on [a, b] by golden-section search."""
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = fn(c), fn(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = fn(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = fn(d)
    return (a + b) / 2


def coordinate_search(
    objective: Callable[[Mapping[str, float]], float],
    start: Mapping[str, float],
    names: Sequence[str],
    sweeps: int = 8,
    tol: float = 1e-3,
) -> tuple[dict[str, float], float, int]:
    """Minimise ``objective`` over the named parameters, one at a time.

    Each sweep runs a golden-section search along every parameter in turn (over its whole
    range, in its log coordinate), keeping the others fixed, and takes the new value only if
    it lowers the objective; sweeps repeat until nothing moves by more than ``tol`` (log
    units). Deterministic; no gradients, so it copes with the max() kinks of the roofline.
    """
    values = dict(start)
    best = objective(values)
    done = 0
    for done in range(1, sweeps + 1):  # noqa: B007 - the count is reported
        moved = 0.0
        for name in names:
            p = param(name)
            x0 = p.to_x(values[name])

            def along(x: float, name: str = name, p: Param = p) -> float:
                return objective({**values, name: p.from_x(x)})

            x = _golden(along, p.to_x(p.lo), p.to_x(p.hi), tol)
            fx = along(x)
            if fx < best - 1e-12:
                values[name] = p.from_x(x)
                best = fx
                moved = max(moved, abs(x - x0))
        if moved < tol:
            break
    return values, best, done


__all__ = ["coordinate_search", "param"]
