"""Stored objects a client can list: kept by id *and* by owner, in the shared state.

Stored responses (``StateBackend.put_response``) are read by id only. An API with a list
endpoint (stored Chat Completions: ``GET /v1/chat/completions``) also needs every object of one
owner, in creation order; that is this collection, over the same backend (SQLite file or
Redis) and with the same owner field (``gateway.stored.ownership``: a key id, None with auth off).
It lives beside the backends rather than in them: it uses their connection and nothing else.

Contract (as stored responses'):

* ``put`` is write-behind and never blocks (it runs on the hot path, when a turn completes);
  this process reads its own writes at once (SQLite: every read first awaits the writes it has
  pending; Redis: a read looks in the one write path's queue first, so an object made while
  Redis is away is read back from memory until Redis has it), other processes once the write
  landed (a round trip);
* ``get``/``owned``/``delete`` are awaited; ``owned`` gives an owner's objects (or everyone's)
  oldest first;
* objects age out as stored responses do: SQLite keeps the newest ``kept`` per kind, Redis
  entries expire after the backend's ``response_ttl_s``.

The caller's view (who may see what) is ``gateway.stored.stored_chat``'s, above this layer.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from fastmode.gateway.state.base import StateBackend
from fastmode.gateway.state.sqlite import SQLiteState
from fastmode.gateway.state.write_queue import Entry

if TYPE_CHECKING:  # imported where Redis is the state: redis-py is ~0.1 s of a start-up
    from fastmode.gateway.state.redis_backend import RedisState

log = logging.getLogger("fastmode.state.objects")


@dataclass
class StoredObject:
    kind: str  # e.g. "chat.completion"
    id: str
    owner: str | None  # the key id of the key that made it (None: auth off)
    created: float  # unix time (the list's order)
    body: dict[str, Any]

    def encode(self) -> bytes:
        return orjson.dumps({"kind": self.kind, "id": self.id, "owner": self.owner,
                             "created": self.created, "body": self.body})

    @classmethod
    def decode(cls, raw: bytes | str) -> StoredObject:
        d = orjson.loads(raw)
        return cls(d["kind"], d["id"], d.get("owner"), float(d["created"]), d["body"])


class ObjectStore(ABC):
    """One backend's stored objects (``objects_of``)."""

    @abstractmethod
    def put(self, item: StoredObject) -> None:
        """Keep (or replace) an object: written in the background, never blocking."""

    async def settled(self) -> None:  # noqa: B027 - Redis reads its queue instead
        """Wait for this process's writes that a read must see (read your own writes)."""

    async def get(self, kind: str, oid: str) -> StoredObject | None:
        await self.settled()
        return await self._get(kind, oid)

    async def owned(self, kind: str, owner: str | None, everyone: bool) -> list[StoredObject]:
        """``owner``'s objects of ``kind`` (everyone's with ``everyone``), oldest first."""
        await self.settled()
        return await self._list(kind, owner, everyone)

    async def delete(self, kind: str, oid: str) -> bool:
        await self.settled()
        return await self._delete(kind, oid)

    @abstractmethod
    async def _get(self, kind: str, oid: str) -> StoredObject | None: ...
    @abstractmethod
    async def _list(self, kind: str, owner: str | None, everyone: bool) -> list[StoredObject]: ...
    @abstractmethod
    async def _delete(self, kind: str, oid: str) -> bool: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL, id TEXT NOT NULL, owner TEXT NOT NULL, created REAL NOT NULL,
    body BLOB NOT NULL, PRIMARY KEY (kind, id)
);
CREATE INDEX IF NOT EXISTS objects_owner ON objects (kind, owner, created);
"""


class SQLiteObjects(ObjectStore):
    """A table in the backend's file, used on its one worker thread (as every statement)."""

    def __init__(self, state: SQLiteState, kept: int = 100_000) -> None:
        self.state = state
        self.kept = kept  # per kind: older objects are dropped
        self._ready = False
        self._pending: set[asyncio.Task[None]] = set()

    def put(self, item: StoredObject) -> None:
        """A local file never is away: one write on the backend's thread, awaited by reads."""
        task = asyncio.get_running_loop().create_task(self._write(item))
        self._pending.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("state: storing an object in the SQLite file failed: %s",
                      task.exception())

    async def settled(self) -> None:
        while self._pending:
            await asyncio.wait(set(self._pending))

    async def _run(self, fn: Any, *args: Any) -> Any:
        def call(db: Any) -> Any:
            if not self._ready:
                db.executescript(_SCHEMA)
                self._ready = True
            return fn(db, *args)

        return await self.state.on_db(call)

    async def _write(self, item: StoredObject) -> None:
        def write(db: Any) -> None:
            db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?)",
                       (item.kind, item.id, item.owner or "", item.created, item.encode()))
            db.execute("DELETE FROM objects WHERE kind = ? AND id IN (SELECT id FROM objects "
                       "WHERE kind = ? ORDER BY created DESC LIMIT -1 OFFSET ?)",
                       (item.kind, item.kind, self.kept))

        await self._run(write)

    async def _get(self, kind: str, oid: str) -> StoredObject | None:
        def query(db: Any) -> bytes | None:
            row = db.execute("SELECT body FROM objects WHERE kind = ? AND id = ?",
                             (kind, oid)).fetchone()
            return None if row is None else bytes(row[0])

        raw = await self._run(query)
        return None if raw is None else StoredObject.decode(raw)

    async def _list(self, kind: str, owner: str | None, everyone: bool) -> list[StoredObject]:
        def query(db: Any) -> list[bytes]:
            if everyone:
                rows = db.execute("SELECT body FROM objects WHERE kind = ? ORDER BY created, id",
                                  (kind,))
            else:
                rows = db.execute("SELECT body FROM objects WHERE kind = ? AND owner = ? "
                                  "ORDER BY created, id", (kind, owner or ""))
            return [bytes(r[0]) for r in rows]

        return [StoredObject.decode(raw) for raw in await self._run(query)]

    async def _delete(self, kind: str, oid: str) -> bool:
        def delete(db: Any) -> int:
            return int(db.execute("DELETE FROM objects WHERE kind = ? AND id = ?",
                                  (kind, oid)).rowcount)

        return bool(await self._run(delete))


class RedisObjects(ObjectStore):
    """A key per object (expiring with the responses' TTL) and two sorted sets per kind, by
    creation time: one per owner, one for everyone (the admin's and auth-off view).

    Writes go through the backend's one write path (``RedisState.enqueue``, ``write_queue``):
    an object stays in this process's memory, readable, until Redis has it."""

    def __init__(self, state: RedisState) -> None:
        self.state = state

    def _keys(self, kind: str, oid: str, owner: str | None) -> tuple[str, str, str]:
        k = self.state.key
        return k("obj", kind, oid), k("objs", kind, "all"), k("objs", kind, "owner", owner or "")

    @staticmethod
    def _entry_key(kind: str, oid: str) -> str:
        return f"obj:{kind}:{oid}"

    async def _call(self, op: str, fn: Any) -> Any:
        """One bounded Redis call through the backend's link (its breaker and metrics)."""
        return await self.state.link.call(op, fn)

    def put(self, item: StoredObject) -> None:
        key, every, mine = self._keys(item.kind, item.id, item.owner)
        raw, ttl = item.encode(), self.state.response_ttl_s

        def write(pipe: Any) -> None:
            pipe.set(key, raw, ex=ttl)
            pipe.zadd(every, {item.id: item.created})
            pipe.zadd(mine, {item.id: item.created})

        self.state.enqueue(Entry(self._entry_key(item.kind, item.id), item, write))

    def _held(self, kind: str, oid: str) -> StoredObject | None:
        held = self.state.writes.get(self._entry_key(kind, oid))
        return held if isinstance(held, StoredObject) else None

    async def _get(self, kind: str, oid: str) -> StoredObject | None:
        held = self._held(kind, oid)
        if held is not None:
            return held
        key = self._keys(kind, oid, None)[0]
        raw = await self._call("objects", lambda: self.state.link.fast.get(key))
        return None if raw is None else StoredObject.decode(raw)

    async def _list(self, kind: str, owner: str | None, everyone: bool) -> list[StoredObject]:
        r = self.state.link.fast
        _, every, mine = self._keys(kind, "", owner)
        index = every if everyone else mine
        ids = [i.decode() if isinstance(i, bytes) else str(i)
               for i in await self._call("objects", lambda: r.zrange(index, 0, -1))]
        out: dict[str, StoredObject] = {}
        if ids:
            keys = [self._keys(kind, i, None)[0] for i in ids]
            raws = await self._call("objects", lambda: r.mget(keys))
            gone = []
            for oid, raw in zip(ids, raws, strict=True):
                if raw is None:
                    gone.append(oid)  # expired (or not written yet): dropped from the index
                else:
                    out[oid] = StoredObject.decode(raw)
            if gone:
                await self._call("objects", lambda: r.zrem(index, *gone))
        for entry in self.state.writes.entries(self._entry_key(kind, "")):
            held = entry.item  # this process's objects Redis does not have yet
            if isinstance(held, StoredObject) and (everyone or held.owner == owner):
                out[held.id] = held
        return sorted(out.values(), key=lambda o: (o.created, o.id))

    async def _delete(self, kind: str, oid: str) -> bool:
        item = await self._get(kind, oid)
        if item is None:
            return False
        key, every, mine = self._keys(kind, oid, item.owner)
        async with self.state.writes.lock:  # never raced by a write that would bring it back
            pipe = self.state.link.fast.pipeline(transaction=True)
            pipe.delete(key)
            pipe.zrem(every, oid)
            pipe.zrem(mine, oid)
            await self._call("objects", pipe.execute)
            self.state.writes.discard(self._entry_key(kind, oid))
        return True


_STORES: weakref.WeakKeyDictionary[StateBackend, ObjectStore] = weakref.WeakKeyDictionary()


def objects_of(state: StateBackend) -> ObjectStore:
    """The stored objects of ``state`` (one store per backend, so pending writes are shared
    by every request of the process)."""
    store = _STORES.get(state)
    if store is None:
        if isinstance(state, SQLiteState):
            store = SQLiteObjects(state)
        else:
            from fastmode.gateway.state.redis_backend import RedisState

            if not isinstance(state, RedisState):
                raise TypeError(f"no stored objects for {type(state).__name__}")
            store = RedisObjects(state)
        _STORES[state] = store
    return store
