"""Counted uses shared by worker processes (``fastmode serve --workers N``).

Every worker holds a copy of each test's replies and faults (``gateway.workers.tests``
broadcasts their registration), so "429 once" must be counted once for all of them, not once per
worker: a use is claimed in a small SQLite file in the supervisor's folder, by one statement
(``INSERT ... ON CONFLICT DO UPDATE ... WHERE used < times``) that either counts it or changes
nothing, atomically across processes. A single gateway needs none (its counters are in memory).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

SCHEMA = """CREATE TABLE IF NOT EXISTS claims (
    test_id TEXT NOT NULL, name TEXT NOT NULL, used INTEGER NOT NULL,
    PRIMARY KEY (test_id, name))"""


class Claims:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=10, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(SCHEMA)

    def take(self, test_id: str, name: str, times: int) -> bool:
        """One use of ``name`` (a test's reply or fault) if fewer than ``times`` were taken."""
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO claims VALUES (?, ?, 1) ON CONFLICT (test_id, name) "
                "DO UPDATE SET used = used + 1 WHERE used < ?", (test_id, name, times))
            return cur.rowcount == 1 and times >= 1

    def clear(self, test_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM claims WHERE test_id = ?", (test_id,))
