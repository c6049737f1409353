"""An asyncio event loop on virtual time: a sleep returns at once, its clock jumps ahead.

The loop's ``time()`` is a number that only moves when the loop would otherwise wait for a
timer: the selector polls without blocking and advances the clock by the wait instead. A
real-time driver run on it plays its whole timeline instantly and exactly (no host lateness),
so what its sleeps add up to can be read off the clock.

Nothing waits forever: a run whose clock passes ``HORIZON_S`` of modeled time fails, and
``until`` fails a wait for a condition after ``limit_s`` of modeled time."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from modeled_time import HORIZON_S, START, ModeledTimeout, until

__all__ = ["HORIZON_S", "ModeledTimeout", "until"]

T = TypeVar("T")

class _Selector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    loop: VirtualTimeLoop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if not events:
            if timeout is None:
                raise RuntimeError("the virtual loop would wait forever (nothing scheduled)")
            self.loop.virtual += timeout
            if self.loop.virtual - START > HORIZON_S:
                raise ModeledTimeout(f"the virtual loop ran past {HORIZON_S:.0f} modeled seconds")
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self.virtual = START

    def time(self) -> float:
        return self.virtual


def run_virtual(main: Callable[[VirtualTimeLoop], Coroutine[Any, Any, T]]) -> T:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()
