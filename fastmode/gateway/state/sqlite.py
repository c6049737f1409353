"""The embedded state backend: one SQLite file (standard library ``sqlite3``, WAL).

The hot path never touches the disk: ledger rows and stored responses are appended to lists
that a background task writes in one transaction every ``flush_interval_s``; buckets and
settings are answered from memory. Every statement runs on one worker thread (a
single-thread executor), so the event loop never waits for an fsync and the one connection is
never shared between threads.

Durability: WAL with ``synchronous=NORMAL`` makes a committed transaction survive the death of
the process (``kill -9``); only an OS crash or power loss could lose the last transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, TypeVar

import orjson

from fastmode.gateway.state.base import (
    ResponseCache,
    StateBackend,
    StoredResponse,
    Take,
    UsageRow,
    UsageTotal,
    Want,
    take_in_memory,
)
from fastmode.gateway.state.health import StateHealth

T = TypeVar("T")
log = logging.getLogger("fastmode.state")

_ROW_FIELDS = [f.name for f in fields(UsageRow)]
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {", ".join(_ROW_FIELDS)}
);
CREATE INDEX IF NOT EXISTS usage_ts ON usage (ts);
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY, created REAL NOT NULL, body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    namespace TEXT NOT NULL, scope TEXT NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (namespace, scope, name)
);
"""
_row_values = operator.attrgetter(*_ROW_FIELDS)  # a row's values in column order (one C call)
_INSERT = (f"INSERT INTO usage ({', '.join(_ROW_FIELDS)}) "
           f"VALUES ({', '.join('?' * len(_ROW_FIELDS))})")
_SUMS = ("COUNT(*), SUM(input_tokens), SUM(cached_input_tokens), SUM(output_tokens), "
         "SUM(reasoning_tokens), SUM(cost_usd)")


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """Bring a ledger written by an older fastmode up to ``UsageRow``: each field added since
    becomes a column holding the field's default in the old rows (so ``SUM`` counts them as
    0, not NULL); ``CREATE TABLE IF NOT EXISTS`` alone would leave the old table as it was."""
    have = {row[1] for row in db.execute("PRAGMA table_info(usage)")}
    for f in fields(UsageRow):
        if f.name in have:
            continue
        default = f.default if f.default is not MISSING else None
        db.execute(f"ALTER TABLE usage ADD COLUMN {f.name} DEFAULT {_sql_literal(default)}")
        log.info("state: the ledger gained the column %s", f.name)


def _sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


class SQLiteState(StateBackend):
    def __init__(self, path: str | Path, *, flush_interval_s: float = 0.25,
                 response_cache: int = 1024, responses_kept: int = 100_000) -> None:
        self.path = Path(path)
        self.flush_interval_s = flush_interval_s
        self.health = StateHealth("sqlite", log)  # a local file: never "down"
        self.responses_kept = responses_kept
        self._pool: ThreadPoolExecutor | None = None  # the one thread that touches the file
        self._db: sqlite3.Connection | None = None
        self._rows: list[UsageRow] = []
        self._responses: list[StoredResponse] = []
        self._cache = ResponseCache(response_cache)
        self._buckets: dict[str, list[float]] = {}  # name -> [level, stamp]
        self._settings: dict[str, dict[tuple[str, str], Any]] = {}
        self._task: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        self.rows_written = 0

    # -- lifecycle --------------------------------------------------------------------------

    async def on_db(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on the backend's one worker thread (every statement runs there),
        for stores built on this backend (``gateway.state.objects``)."""

        def call() -> T:
            if self._db is None:
                raise RuntimeError("the state backend is not started")
            return fn(self._db)

        result: T = await self._run(call)
        return result

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="fastmode-state")
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(_SCHEMA)
        _add_missing_columns(db)
        self._db = db
        for ns, scope, name, value in db.execute(
                "SELECT namespace, scope, name, value FROM settings"):
            self._settings.setdefault(ns, {})[(scope, name)] = orjson.loads(value)

    async def start(self) -> None:
        await self._run(self._open)
        self._task = asyncio.create_task(self._writer(), name="fastmode-state-writer")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._db is not None:
            await self.flush()
            db, self._db = self._db, None
            await self._run(db.close)
        if self._pool is not None:  # a later start() (the app started again) makes a new one
            self._pool.shutdown(wait=True)
            self._pool = None

    async def _writer(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            try:
                await self.flush()
            except Exception:  # a full disk must not kill the writer: retried next round
                log.exception("state: writing the ledger failed; retrying")

    # -- writes -----------------------------------------------------------------------------

    def _write(self, rows: list[UsageRow], responses: list[StoredResponse]) -> None:
        db = self._db
        assert db is not None
        db.execute("BEGIN")
        try:
            if rows:
                db.executemany(_INSERT, map(_row_values, rows))
            if responses:
                now = time.time()
                db.executemany(
                    "INSERT OR REPLACE INTO responses (id, created, body) VALUES (?, ?, ?)",
                    [(r.id, now, r.encode()) for r in responses])
                db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses "
                           "ORDER BY created DESC LIMIT -1 OFFSET ?)", (self.responses_kept,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def flush(self) -> None:
        async with self._flush_lock:
            rows, self._rows = self._rows, []
            responses, self._responses = self._responses, []
            if not rows and not responses or self._db is None:
                return
            # The write runs on the backend's thread and cannot be stopped there: a flush
            # cancelled mid-write (close() cancelling the writer at shutdown) waits for its
            # outcome, so the rows are kept for the next flush only if they were not written.
            # Keeping them on cancellation alone wrote every row of that batch twice.
            write = asyncio.ensure_future(self._run(self._write, rows, responses))
            try:
                await asyncio.shield(write)
            finally:
                if not write.done():  # cancelled while the thread writes: wait for its outcome
                    await asyncio.wait({write})
                if write.cancelled() or write.exception() is not None:
                    self._rows[:0] = rows  # not written: kept for the next round
                    self._responses[:0] = responses
                else:
                    self.rows_written += len(rows)

    def append_usage(self, row: UsageRow) -> None:
        self._rows.append(row)

    # -- ledger queries ---------------------------------------------------------------------

    async def usage_totals(self, *, per_day: bool = False, api_key: str | None = None,
                           since: float | None = None) -> list[UsageTotal]:
        await self.flush()
        day = "strftime('%Y-%m-%d', ts, 'unixepoch')" if per_day else "NULL"
        where, args = ["tier_served IS NOT NULL"], list[Any]()
        if api_key is not None:
            where.append("api_key = ?")
            args.append(api_key)
        if since is not None:
            where.append("ts >= ?")
            args.append(since)
        sql = (f"SELECT api_key, tier_served, {day} AS day, {_SUMS} FROM usage "
               f"WHERE {' AND '.join(where)} GROUP BY api_key, tier_served, day "
               f"ORDER BY api_key, tier_served, day")

        def query() -> list[tuple[Any, ...]]:
            assert self._db is not None
            return self._db.execute(sql, args).fetchall()

        return [UsageTotal(k, t, d, n, i or 0, c or 0, o or 0, r or 0, cost or 0.0)
                for k, t, d, n, i, c, o, r, cost in await self._run(query)]

    async def usage_rows(self, *, since: float | None = None,
                         limit: int = 10_000) -> list[UsageRow]:
        await self.flush()
        sql = f"SELECT {', '.join(_ROW_FIELDS)} FROM usage WHERE ts >= ? ORDER BY id LIMIT ?"

        def query() -> list[tuple[Any, ...]]:
            assert self._db is not None
            return self._db.execute(sql, (since or 0.0, limit)).fetchall()

        return [UsageRow(*row) for row in await self._run(query)]

    # -- buckets ----------------------------------------------------------------------------

    def take_all(self, wants: Sequence[Want], now: float) -> list[Take]:
        return take_in_memory(self._buckets, wants, now)

    # -- stored responses -------------------------------------------------------------------

    def put_response(self, item: StoredResponse) -> None:
        self._cache.keep(item)
        self._responses.append(item)

    def cached_response(self, rid: str) -> StoredResponse | None:
        return self._cache.get(rid)

    async def get_response(self, rid: str) -> StoredResponse | None:
        hit = self._cache.get(rid) or next(
            (r for r in reversed(self._responses) if r.id == rid), None)  # not yet written
        if hit is not None:
            self._cache.keep(hit)
            return hit
        if self._db is None:
            return None

        def query() -> bytes | None:
            assert self._db is not None
            row = self._db.execute("SELECT body FROM responses WHERE id = ?", (rid,)).fetchone()
            return None if row is None else row[0]

        raw = await self._run(query)
        if raw is None:
            return None
        item = StoredResponse.decode(raw)
        self._cache.keep(item)
        return item

    async def delete_response(self, rid: str) -> bool:
        await self.flush()
        known = self._cache.pop(rid, None) is not None

        def delete() -> int:
            assert self._db is not None
            return self._db.execute("DELETE FROM responses WHERE id = ?", (rid,)).rowcount

        deleted = await self._run(delete) if self._db is not None else 0
        return known or deleted > 0

    # -- settings ---------------------------------------------------------------------------

    async def put_setting(self, namespace: str, scope: str, name: str, value: Any) -> None:
        raw = orjson.dumps(value)

        def write() -> None:
            assert self._db is not None
            self._db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?, ?, ?)",
                             (namespace, scope, name, raw))

        if self._db is not None:
            await self._run(write)
        self._settings.setdefault(namespace, {})[(scope, name)] = orjson.loads(raw)

    async def delete_settings(self, namespace: str, scope: str | None = None,
                              name: str | None = None) -> int:
        current = self._settings.get(namespace, {})
        doomed = [k for k in current
                  if (scope is None or k[0] == scope) and (name is None or k[1] == name)]

        def delete() -> None:
            assert self._db is not None
            self._db.executemany(
                "DELETE FROM settings WHERE namespace = ? AND scope = ? AND name = ?",
                [(namespace, s, n) for s, n in doomed])

        if doomed and self._db is not None:
            await self._run(delete)
        for k in doomed:
            current.pop(k, None)
        return len(doomed)

    def settings(self, namespace: str, scope: str | None = None) -> dict[tuple[str, str], Any]:
        current = self._settings.get(namespace, {})
        if scope is None:
            return dict(current)
        return {k: v for k, v in current.items() if k[0] == scope}
