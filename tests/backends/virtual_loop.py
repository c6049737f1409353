"""An asyncio event loop on virtual time: a sleep returns at once, its clock jumps ahead.

The loop's ``time()`` is a number that only moves when the loop would otherwise wait for a
timer: the selector polls without blocking and advances the clock by the wait instead. A
real-time driver run on it plays its whole timeline instantly and exactly (no host lateness),
so what its sleeps add up to can be read off the clock.

Nothing waits forever: a run whose clock passes ``HORIZON_S`` of modeled time fails, and
``until`` fails a wait for a condition after ``limit_s`` of modeled time."""

from __future__ import annotations

import asyncio
import inspect
import selectors
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

HORIZON_S = 3600.0  # modeled seconds a run may last: an hour, far beyond any test's timeline
START = 1000.0


class ModeledTimeout(AssertionError):
    """The modeled clock ran past its bound: what a test waited for never came."""


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


async def until(condition: Callable[[], bool | Awaitable[bool]], what: str,
                limit_s: float = HORIZON_S, every_s: float = 0.01) -> None:
    """Wait until ``condition()`` (a bool, or an awaitable of one) holds, looking every
    ``every_s`` modeled seconds; fail with ``what`` once ``limit_s`` modeled seconds passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        ok = condition()
        if inspect.isawaitable(ok):
            ok = await ok
        if ok:
            return
        if loop.time() >= deadline:
            raise ModeledTimeout(f"{what}: not within {limit_s:g} modeled seconds")
        await asyncio.sleep(every_s)
