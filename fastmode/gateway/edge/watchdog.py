"""The stalled-reader watchdog: one periodic task for every stream, never a timer per write.

A client that stops reading fills its socket buffer; the server's next write to it then waits
forever (uvicorn waits for the transport to drain), holding the batch slot and the request
open. Each streaming turn marks the moment a write began (``Turn.writing_since``) and clears it
when the write returns; every ``period`` this task looks for writes pending longer than
``server.stream_max_lag_s`` and cancels them. The turn ends as ``cut`` (detail
``reader_stalled``), billed for the tokens the engine had generated, its slot free at the next
step. A reader that still reads but falls behind is cut by the turn itself (``Turn._events``
checks each batch's age), with the protocol's error event.
"""

from __future__ import annotations

import asyncio
import logging

from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.pipeline.turn_errors import lagging
from fastmode.gateway.state import CUT

log = logging.getLogger("fastmode.watchdog")


class Watchdog:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.max_lag = gateway.config.server.stream_max_lag_s
        self.period = min(1.0, self.max_lag / 4)
        self.cut = 0  # streams cut so far
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="fastmode-watchdog")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.period)
            self.sweep(loop.time())

    def sweep(self, now: float) -> int:
        """Cut every stream whose pending write is older than the bound; how many were cut."""
        n = 0
        for turn in list(self.gateway.turns):
            since, writer = turn.writing_since, turn.writer
            if not since or writer is None or now - since <= self.max_lag:
                continue
            if turn.abort is None:
                turn.abort = (lagging(now - since, self.max_lag), 499, CUT, "reader_stalled")
            job = turn.job
            log.warning("stream %s cut: its reader has not read for %.1f s",
                        job.id if job else "?", now - since)
            writer.cancel()
            n += 1
        self.cut += n
        return n
