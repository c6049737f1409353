"""What the virtual-time loops share (``tests/backends/virtual_loop.py`` for the drivers,
``tests/gateway/virtual_app.py`` for whole apps): the bound on a run's modeled time, the error
a run past it raises, and ``until``, a wait for a condition bounded in modeled seconds."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

HORIZON_S = 3600.0  # modeled seconds a run may last: an hour, far beyond any test's timeline
START = 1000.0  # the loops' clock at the start of a run


class ModeledTimeout(AssertionError):
    """The modeled clock ran past its bound: what a test waited for never came."""


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
