"""fastmode's seating, replayed for the bare reference (``bench/pacing.py``).

On the built-in config the engine seats so many streams at a time (the other tenants hold
the rest of the batch) and the others wait in its queue; the bare app would stream them all
at once. Each bare stream is held as long as fastmode's stream of the same rank waited for its
first token (``bench/bare_asgi.py``'s ``?after=``), so both servers carry the same concurrent
streams and a fixed cost per engine step is spread over the same tokens.
"""

from __future__ import annotations

from typing import Any


def first_tokens(results: list[dict[str, Any]]) -> list[float]:
    """When each stream's first token arrived, seconds after its request was sent, in order."""
    return sorted(r["series"][0][0] - r["t_send"] for r in results if r["series"])


def held_paths(path: str, starts: list[float] | None, n: int) -> list[str]:
    """The bare app's request paths: with fastmode's schedule (``starts``), one per stream
    fastmode served, each starting as late as fastmode's stream of the same rank did; without
    one (no schedule yet, or ``--bare-schedule at-once``), ``n`` that start at once."""
    if not starts:
        return [path] * n
    return [f"{path}?after={start:.6f}" for start in starts]


def mean_active(results: list[dict[str, Any]]) -> float:
    """Streams streaming at once, on average: their first-to-last-token spans over the run's."""
    spans = [(r["series"][0][0], r["series"][-1][0]) for r in results if r["series"]]
    if not spans:
        return 0.0
    whole = max(b for _, b in spans) - min(a for a, _ in spans)
    return sum(b - a for a, b in spans) / whole if whole > 0 else float(len(spans))
