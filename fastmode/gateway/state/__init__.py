"""Shared gateway state (ledger, buckets, stored responses, settings) behind one interface.

``base.StateBackend`` is the contract; ``sqlite.SQLiteState`` the embedded default. A backend is
chosen by ``open_state`` from the config (``[state]``): the SQLite file, or Redis
(``redis_backend``), whose outages ``health`` turns into 503s, one log line and metrics.
"""

from __future__ import annotations

from pathlib import Path

from fastmode.gateway.state.base import (
    CANCELLED,
    COMPLETED,
    CUT,
    ENDINGS,
    FAILED,
    REJECTED,
    SHUTDOWN,
    StateBackend,
    StoredResponse,
    Take,
    UsageRow,
    UsageTotal,
    Want,
    take_in_memory,
)
from fastmode.gateway.state.health import StateHealth, StateUnavailable
from fastmode.gateway.state.sqlite import SQLiteState

__all__ = [
    "CANCELLED", "COMPLETED", "CUT", "ENDINGS", "FAILED", "REJECTED", "SHUTDOWN",
    "SQLiteState", "StateBackend", "StateHealth", "StateUnavailable", "StoredResponse",
    "Take", "UsageRow", "UsageTotal", "Want", "open_state", "take_in_memory",
]


def open_state(path: str | Path, flush_interval_s: float = 0.25,
               redis_url: str = "", timeout_s: float = 0.25,
               pending_max: int = 10_000) -> StateBackend:
    """The backend for ``[state]``: Redis when ``redis_url`` is set (several gateway processes
    or machines share it; ``timeout_s`` bounds each of its calls on a request's path;
    ``pending_max`` bounds what waits in memory while it is away), else the
    SQLite file at ``path`` (``:memory:`` keeps nothing)."""
    if redis_url:
        from fastmode.gateway.state.redis_backend import RedisState

        return RedisState(redis_url, flush_interval_s=flush_interval_s, timeout_s=timeout_s,
                          pending_max=pending_max)
    return SQLiteState(path, flush_interval_s=flush_interval_s)
