"""Engine apps on a virtual-time event loop: their modeled timeline played instantly, exactly.

``tests/backends/virtual_loop.py``'s loop advances its clock by a timer's wait instead of
waiting; an app also waits on threads (its state backend's SQLite), so this loop blocks for
real when no timer is due and only a thread can wake it. The driver's clock is the loop's
(time scale 1): every modeled time (``time_info``, arrivals, first tokens) is exact and the
same on any host, and ``loop.time()`` moves only by the replicas' sleeps. As on
``virtual_loop``'s, nothing waits forever: a run past ``HORIZON_S`` modeled seconds fails,
and ``until`` bounds a wait for a condition."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
from modeled_time import HORIZON_S, START, ModeledTimeout, until

__all__ = ["HORIZON_S", "ModeledTimeout", "until"]

T = TypeVar("T")

class _Selector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    loop: VirtualAppLoop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if events:
            return events
        if timeout is None:  # only a thread (the state backend's) can wake the loop
            return super().select(None)
        self.loop.virtual += timeout
        if self.loop.virtual - START > HORIZON_S:
            raise ModeledTimeout(f"the app's loop ran past {HORIZON_S:.0f} modeled seconds")
        return events


class VirtualAppLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self.virtual = START

    def time(self) -> float:
        return self.virtual


def run_app_virtual(main: Callable[[VirtualAppLoop], Coroutine[Any, Any, T]]) -> T:
    loop = VirtualAppLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


@asynccontextmanager
async def app_client(config: Any, base_url: str = "http://e") -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the app of ``config`` (its lifespan started and stopped around the
    block); ``client.app`` is the app."""
    from fastmode.gateway.app import create_app

    app = create_app(config)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url=base_url) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client
