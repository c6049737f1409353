"""The parameters of one load, validated: where to send, how fast, for how long, over what.

``LoadConfig.validate`` raises ``LoadError`` naming the ``fastmode bench`` flag at fault, so the
command can show it as a one-line error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fastmode.clients.workload import Route
from fastmode.workload import ARRIVAL_KINDS

TRANSPORTS = ("http", "http-fresh", "ws")
ARRIVALS = ARRIVAL_KINDS  # the shared definition: the simulator draws the same processes


class LoadError(ValueError):
    """The load parameters are invalid; the message names the flag."""


@dataclass
class LoadConfig:
    url: str
    routes: dict[str, Route]
    rate: float | None = None
    concurrency: int | None = None
    arrivals: str = "poisson"
    requests: int | None = None
    duration: float | None = None
    warmup: float = 0.0
    cooldown: float = 0.0
    transport: str = "http"
    timeout: float = 600.0  # per request, whole response
    connect_timeout: float = 10.0
    headers: dict[str, str] = field(default_factory=dict)
    ignore_eos: bool = True
    strict_stream: bool = False
    seed: int = 1
    progress: bool = True
    replay_offsets: bool = False  # open loop at the trace's own offsets
    phase: float = 0.0  # open loop: shift of every arrival (worker k of N: k / total rate)

    def validate(self) -> None:
        modes = sum(x is not None for x in (self.rate, self.concurrency)) + self.replay_offsets
        if modes != 1:
            raise LoadError("--rate/--concurrency: give exactly one (a trace replays its offsets)")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise LoadError(f"--rate: must be > 0, got {self.rate}")
        if self.concurrency is not None and self.concurrency <= 0:
            raise LoadError(f"--concurrency: must be > 0, got {self.concurrency}")
        if self.requests is not None and self.requests <= 0:
            raise LoadError(f"--requests: must be > 0, got {self.requests}")
        if self.duration is not None and not self.duration > 0:
            raise LoadError(f"--duration: must be > 0, got {self.duration}")
        if self.requests is None and self.duration is None and not self.replay_offsets:
            raise LoadError("give --requests N or --duration SECONDS")
        for name in ("warmup", "cooldown"):
            if getattr(self, name) < 0:
                raise LoadError(f"--{name}: must be >= 0")
        if self.duration is not None and self.warmup + self.cooldown >= self.duration:
            raise LoadError("--warmup + --cooldown: must be shorter than --duration")
        if self.arrivals not in ARRIVALS:
            raise LoadError(
                f"--arrivals: unknown {self.arrivals!r}; allowed: {', '.join(ARRIVALS)}"
            )
        if self.transport not in TRANSPORTS:
            raise LoadError(
                f"--transport: unknown {self.transport!r}; allowed: {', '.join(TRANSPORTS)}"
            )
        if not self.timeout > 0:
            raise LoadError(f"--timeout: must be > 0, got {self.timeout}")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise LoadError(f"--url: expected http(s)://host[:port], got {self.url!r}")

    def base_url(self) -> str:
        """The server root: a trailing ``/v1`` is dropped (tier routes carry their own path)."""
        url = self.url.rstrip("/")
        return url[:-3] if url.endswith("/v1") else url

    def is_loopback(self) -> bool:
        return (urlsplit(self.url).hostname or "") in ("localhost", "127.0.0.1", "::1")

    def params(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "routes": {k: {"path": v.path, "model": v.model} for k, v in self.routes.items()},
            "mode": "closed" if self.concurrency else "open", "rate": self.rate,
            "concurrency": self.concurrency,
            "arrivals": "trace" if self.replay_offsets else self.arrivals,
            "requests": self.requests, "duration_s": self.duration, "warmup_s": self.warmup,
            "cooldown_s": self.cooldown, "transport": self.transport, "timeout_s": self.timeout,
            "ignore_eos": self.ignore_eos, "strict_stream": self.strict_stream, "seed": self.seed,
        }  # fmt: skip


def parse_headers(items: list[str], api_key: str | None = None) -> dict[str, str]:
    """``--header NAME:VALUE`` (repeatable) and ``--api-key`` -> request headers."""
    headers: dict[str, str] = {}
    for h in items:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise LoadError(f"--header: expected NAME:VALUE, got {h!r}")
        headers[name.strip().lower()] = value.strip()
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers
