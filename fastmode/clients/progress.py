"""The live progress bar of a load (stderr): requests done, errors, in flight, output tokens/s."""

from __future__ import annotations

import asyncio
from collections import deque
from time import perf_counter

from fastmode.clients.load_config import LoadConfig
from fastmode.clients.records import Live

REFRESH_S = 0.25
RATE_WINDOW_S = 2.0


class Progress:
    """A rich progress bar over ``Live`` counters; ``run`` refreshes it until cancelled."""

    def __init__(self, cfg: LoadConfig, live: Live, label: str = "bench") -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        self.cfg, self.live = cfg, live
        self.samples: deque[tuple[float, int]] = deque(maxlen=64)
        self.bar = Bar(
            TextColumn(f"[bold]{label}"), BarColumn(), TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(), console=Console(stderr=True), auto_refresh=False,
        )
        self.by_time = cfg.requests is None and cfg.duration is not None
        total = cfg.duration if self.by_time else cfg.requests
        self.task = self.bar.add_task(label, total=total, status="")

    async def run(self) -> None:
        t0 = perf_counter()
        with self.bar:
            try:
                while True:
                    self.update(perf_counter() - t0)
                    await asyncio.sleep(REFRESH_S)
            finally:
                self.update(perf_counter() - t0)

    def update(self, elapsed: float) -> None:
        live = self.live
        now = perf_counter()
        self.samples.append((now, live.tokens))
        old = next((s for s in self.samples if now - s[0] <= RATE_WINDOW_S), self.samples[0])
        tps = (live.tokens - old[1]) / (now - old[0]) if now > old[0] else 0.0
        status = (f"{live.done} done  {live.errors} errors  {live.inflight} in flight  "
                  f"{tps:,.0f} tok/s")
        done = min(elapsed, self.cfg.duration or 0) if self.by_time else live.done
        self.bar.update(self.task, completed=done, status=status)
        self.bar.refresh()
