"""What the soak watches besides its clients (``bench/soak.py``): each replica's step counter
on ``/metrics`` (a replica with work whose counter stands still is frozen), ``/readyz``, and the
server log's tracebacks and supervision lines, summed."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from pathlib import Path

import httpx

FROZEN_AFTER_S = 30.0  # a replica with work whose step count stood still this long: frozen


def replica_series(text: str) -> dict[str, dict[str, float]]:
    """Per replica (its ``replica`` label): running, waiting and steps from /metrics."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = re.match(r'fastmode_replica_(running|waiting|steps_total)\{(.*?)\} (\S+)$', line)
        if m:
            name = re.search(r'replica="([^"]*)"', m.group(2))
            if name:
                out.setdefault(name.group(1), {})[m.group(1)] = float(m.group(3))
    return out


async def watch_replicas(url: str, until: float, frozen: dict[str, float],
                         unready: Counter[str]) -> None:
    """Every 5 s: a replica with work whose step count (or, on a server without the steps
    counter, whose running and waiting counts) stood still ``FROZEN_AFTER_S`` is frozen
    (``frozen``: name -> the longest time seen); /readyz's unhealthy replicas are counted."""
    still: dict[str, tuple[tuple[float, ...], float]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        while time.monotonic() < until:
            await asyncio.sleep(5)
            try:
                series = replica_series((await client.get("/metrics")).text)
                ready = (await client.get("/readyz")).json()
            except (httpx.HTTPError, ValueError):
                continue
            for name in ready.get("unhealthy_replicas", {}):
                unready[name] += 1
            now = time.monotonic()
            for name, v in series.items():
                work = v.get("running", 0) + v.get("waiting", 0)
                key = ((v["steps_total"],) if "steps_total" in v
                       else (v.get("running", 0), v.get("waiting", 0)))
                seen = still.get(name)
                if not work or seen is None or seen[0] != key:
                    still[name] = (key, now)
                elif now - seen[1] >= FROZEN_AFTER_S:
                    frozen[name] = max(frozen.get(name, 0.0), now - seen[1])


def log_findings(path: Path) -> Counter[str]:
    """Tracebacks in the server log, by their last line, and the supervisor's lines."""
    found: Counter[str] = Counter()
    lines = path.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        if "stream listener failed" in line:
            found["log: stream listener failed"] += 1
        if "replica " in line and ("failed" in line or "stalled" in line):
            found["log: " + re.sub(r"replica \S+", "replica *", line.split(" - ")[-1])[:90]] += 1
        if line.startswith("Traceback"):
            j = i + 1
            while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                j += 1
            if j < len(lines):
                found["traceback: " + lines[j][:90]] += 1
    return found


def metric(url: str, name: str) -> float:
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total
