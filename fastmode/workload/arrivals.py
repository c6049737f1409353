"""When requests arrive: open loop (Poisson or evenly spaced) and closed-loop user streams.

Open loop: requests arrive at a rate whatever the server does with them. The arrival times and
the requests are drawn from one random stream, interleaved (gap, then the request), which is
why they are generated here together with the request shapes (``ShapeSampler.timed``) rather
than by each side on its own.

Closed loop: each user sends its next request when its previous one ends, so arrival times
come from the engine, not from here; what is shared is each user's own random stream, so that
user u's k-th request is the same whatever order the engine finishes requests in.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from fastmode.workload.errors import WorkloadError

ARRIVAL_KINDS: tuple[str, ...] = ("poisson", "constant")


def check_arrivals(kind: str, flag: str = "arrivals") -> None:
    if kind not in ARRIVAL_KINDS:
        raise WorkloadError(f"{flag}: unknown {kind!r}; allowed: {', '.join(ARRIVAL_KINDS)}")


def open_loop_times(rate: float, kind: str, rng: random.Random) -> Iterator[float]:
    """Arrival times from 0: exponential gaps (Poisson) or ``n / rate`` (constant, from t=0).

    Lazy and endless: the caller stops at its duration or request count. A Poisson time draws
    one ``expovariate`` from ``rng`` when it is taken, a constant one draws nothing.
    """
    check_arrivals(kind)
    if not rate > 0:
        raise WorkloadError(f"rate: must be > 0, got {rate}")
    t, n = 0.0, 0
    poisson = kind == "poisson"
    while True:
        if poisson:
            t += rng.expovariate(rate)
        else:
            t = n / rate
        n += 1
        yield t


def user_rng(seed: int, user: int) -> random.Random:
    """Closed loop: user ``user``'s own stream for workload ``seed``."""
    return random.Random(f"{seed}:{user}")
