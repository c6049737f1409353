"""The real-time driver's clock: modeled seconds, played at ``scale`` wall seconds each.

At ``scale = 1`` modeled time is the event loop's clock itself (nothing is converted, nothing
costs more). At another scale (``[server] time_scale``, ``fastmode serve --time-scale``) the
modeled clock runs ``1 / scale`` times as fast as the wall clock from the moment the driver was
built: at 0.01 a 10 s modeled answer streams in 0.1 s of wall time. Everything the engine
stamps (arrivals, step ends, first tokens, finishes: so ``time_info``, usage, traces, the
ledger and the pacing between events) stays in modeled seconds; only the sleeps shrink. Tests
then run as fast as the host allows while reading the same modeled figures.

A replica on a scaled clock never slips (``realtime.py``): at 0.01 a spark step lasts a few
microseconds of wall time, less than the host takes to serve it, so the host is always a little
behind; a slip would write that into every reported time. Instead the replica runs late steps
back to back until it is on its timeline again: the wall pacing is only approximately the
model's (it is not the model's at any scale other than 1 anyway), and every modeled time is
exactly the model's, the same on any host (``host_lag_time`` is 0).

The wall clock is ``time.monotonic`` when scaled, the clock the gateway's traces read, so a
write's wall time converts to the same modeled timeline the steps are on.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class ScaledClock:
    """``now()`` in modeled seconds; ``wall(seconds)`` the wall time a modeled span takes."""

    __slots__ = ("scale", "origin", "now", "_wall")

    def __init__(self, loop_time: Callable[[], float], scale: float = 1.0,
                 wall: Callable[[], float] | None = None) -> None:
        """``loop_time``: the event loop's clock (what the sleeps are measured on); ``wall``:
        the clock scaled times are read from (``time.monotonic``; a test's virtual loop
        passes its own)."""
        if not scale > 0:
            raise ValueError(f"time scale must be positive, got {scale!r}")
        self.scale = scale
        if wall is None:
            wall = loop_time if scale == 1.0 else time.monotonic
        self._wall = wall
        self.origin = wall()
        self.now: Callable[[], float] = wall if scale == 1.0 else self._scaled_now

    def _scaled_now(self) -> float:
        return self.origin + (self._wall() - self.origin) / self.scale

    def to_model(self, wall_t: float) -> float:
        """A ``time.monotonic()`` reading as a modeled time (identity at scale 1)."""
        if self.scale == 1.0:
            return wall_t
        return self.origin + (wall_t - self.origin) / self.scale

    def wall(self, modeled_s: float) -> float:
        """Wall seconds a modeled span of ``modeled_s`` takes to play."""
        return modeled_s * self.scale
