"""The shared state backend for several gateway processes or machines: Redis (redis-py).

What LiteLLM and similar gateways keep in Redis for the same reason: every gateway replica
must see the same rate-limit buckets, stored responses, usage totals and settings.

- **buckets**: ``take_all_async`` runs one Lua script (atomic in Redis, on Redis's clock) per
  call on the asyncio client: one loopback round trip that a turn awaits before admission, per
  request and only for a key with a limit. That is what makes a limit exact across processes
  (a key limited to N requests per minute gets N in total, however its requests are spread),
  where a local lease would let each process overshoot or refuse early.
- **ledger**: ``append_usage`` buffers; a background task writes each batch in one transaction
  (``flush_interval_s``): the rows in a sorted set by time, and the totals per (key, tier) and
  per (key, tier, day) as hash counters (``HINCRBY``), so ``usage_totals`` reads a few hashes
  however many rows there are. Each batch is counted once: its transaction also records the
  batch's number for this process, and a batch whose write failed (perhaps after Redis applied
  it) is written again only if that number is lower (``_write_batch``).
- **responses** and every other stored kind (``gateway.state.objects``): one write path, the
  ``WriteQueue`` (``write_queue``): ``put_response`` and ``enqueue`` wake a writer task that
  sends every pending entry in one pipeline at once (not at the next flush: a continuation
  may arrive at another gateway a round trip later; a read that misses asks again for up to
  ~1 s, so such a continuation waits for the write instead of failing); entries expire after
  ``response_ttl_s``.
- **settings**: a hash per namespace; writes are awaited, reads served from memory and
  refreshed from Redis every ``flush_interval_s`` (so rules set on one gateway apply on all).

Durability is Redis's (``appendonly yes`` for the ledger to survive a Redis restart).

Redis can fail (stopped, hung, out of memory); nothing here ever blocks the event loop. Every
call goes through ``RedisLink`` (``redis_link``): bounded asyncio clients (``[state] timeout_s``
on a request's path) and the breaker of ``health`` (``gateway.state.health``): a failure is a
``StateUnavailable`` (503), logged once per outage, and calls fail fast until the background
task's probe (every ``flush_interval_s``) finds Redis answering again; it then writes what was
buffered meanwhile (rows and stored objects wait in memory, readable, up to ``pending_max``;
a restart during an outage loses them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

import orjson
import redis

from fastmode.gateway.state.base import (
    TOTAL_FIELDS,
    ResponseCache,
    StateBackend,
    StoredResponse,
    Take,
    UsageRow,
    UsageTotal,
    Want,
    sum_rows,
    takes_after,
)
from fastmode.gateway.state.health import StateHealth, StateUnavailable
from fastmode.gateway.state.redis_link import RedisLink
from fastmode.gateway.state.write_queue import PENDING_MAX, Entry, WriteQueue

log = logging.getLogger("fastmode.state.redis")

_SEP = "\x1f"

# KEYS: the buckets; ARGV: amount, rate per s, burst for each. All or nothing: every bucket is
# refilled to now and, if each has its amount, all are taken. Returns {taken, level, ...}.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local levels, taken = {}, 1
for i = 1, #KEYS do
  local amount, rate, burst = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local b = redis.call('HMGET', KEYS[i], 'level', 'stamp')
  local level, stamp = tonumber(b[1]), tonumber(b[2])
  if level == nil then level, stamp = burst, now end
  level = math.min(burst, level + math.max(0, now - stamp) * rate)
  levels[i] = level
  if amount > level then taken = 0 end
end
local out = {taken}
for i = 1, #KEYS do
  local amount, rate, burst = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  if taken == 1 then levels[i] = levels[i] - amount end
  redis.call('HSET', KEYS[i], 'level', tostring(levels[i]), 'stamp', tostring(now))
  redis.call('EXPIRE', KEYS[i], math.ceil(burst / rate) + 60)
  out[i + 1] = tostring(levels[i])
end
return out
"""


def _str(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _row_json(row: UsageRow) -> bytes:
    return orjson.dumps(row.as_dict())


# how long a process's last ledger batch number is kept after its last write: the longest a
# failed batch may wait for its retry (an outage's end) and still be told apart from one Redis
# applied (seconds: 7 days; one key per gateway process, not one per batch)
LEDGER_SEQ_TTL_S = 7 * 86400
CLOSE_WAIT_S = 5.0  # close(): how long the round under way may take to end
# the waits (seconds) before asking Redis again for a response not there yet (get_response)
RESPONSE_WAITS_S = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.4)

class RedisState(StateBackend):
    def __init__(self, url: str, *, prefix: str = "fastmode:", flush_interval_s: float = 0.25,
                 timeout_s: float = 0.25, response_cache: int = 1024,
                 response_ttl_s: int = 30 * 86400, pending_max: int = PENDING_MAX) -> None:
        self.url = url
        self.prefix = prefix
        self.flush_interval_s = flush_interval_s
        self.timeout_s = timeout_s
        self.response_ttl_s = response_ttl_s
        self.pending_max = pending_max
        self.health = StateHealth("Redis", log)
        self.link = RedisLink(url, timeout_s, self.health)
        self._take_sha = ""
        self._rows: list[UsageRow] = []
        # the batch whose write failed, (number, rows): at most one, since no later batch is
        # written before it is settled
        self._unsure: tuple[int, list[UsageRow]] | None = None
        self._writer = secrets.token_hex(8)  # this process's ledger writer: its batches' key
        self._batches = 0  # the number of this process's last ledger batch
        self._cache = ResponseCache(response_cache)
        self._settings: dict[str, dict[tuple[str, str], Any]] = {}
        self.writes = WriteQueue()  # every stored kind's one write path (``write_queue``)
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._flush_lock = asyncio.Lock()
        self.rows_written = 0

    def _k(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def key(self, *parts: str) -> str:
        """A key in this gateway's namespace (``[state] redis_prefix``), for stores built on
        this backend (``gateway.state.objects``)."""
        return self._k(*parts)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self.link.open()
        await self.link.slow.ping()  # a Redis that is away at start fails the start, plainly
        self._take_sha = await self.link.slow.script_load(_TAKE)
        await self._refresh_settings()
        self._tasks = [asyncio.create_task(self._background(), name="fastmode-state-redis"),
                       asyncio.create_task(self._response_writer(), name="fastmode-responses")]

    async def close(self) -> None:
        # the background tasks end after the round under way, never cancelled inside a Redis
        # command: redis-py then waits on that connection until the server drops it, and
        # close() with it (cancelling stays the last resort, for a Redis that stopped answering)
        self._closing.set()
        self._wake.set()
        if self._tasks:
            _, late = await asyncio.wait(self._tasks, timeout=CLOSE_WAIT_S)
            for task in late:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._tasks = []
        if self.link.opened:
            try:
                await self.flush()
            except StateUnavailable:
                log.error("state: Redis unavailable at exit: %d ledger rows and %d stored "
                          "objects were not written", self.rows_pending, len(self.writes))
        await self.link.aclose()

    async def _background(self) -> None:
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):  # a flush round every flush_interval_s
                await asyncio.wait_for(self._closing.wait(), self.flush_interval_s)
            if self._closing.is_set():
                return  # close() writes what is left
            if not self.health.up and not await self.link.probe():
                continue  # still away: rows and responses stay buffered
            with contextlib.suppress(StateUnavailable):  # counted and logged by `health`
                await self.flush()
                await self._refresh_settings()

    # -- usage ledger -----------------------------------------------------------------------

    def append_usage(self, row: UsageRow) -> None:
        self._rows.append(row)

    @property
    def rows_pending(self) -> int:
        """Rows not known to be written: buffered, or in a batch whose write failed."""
        return len(self._rows) + (len(self._unsure[1]) if self._unsure else 0)

    async def flush(self) -> None:
        await self._write_pending()
        async with self._flush_lock:
            if not self.link.opened:
                return
            await self._retry_unsure()
            rows, self._rows = self._rows, []
            if not rows:
                return
            self._batches += 1
            await self._write_batch(self._batches, rows)

    async def _write_batch(self, batch: int, rows: list[UsageRow]) -> None:
        """One batch of rows in one transaction, which also records its number as this
        process's last: a write that failed may still have been applied (Redis ran the EXEC,
        the reply was lost to a timeout or a dropped connection), and a batch written again
        would count its rows' totals twice. So a failed batch keeps its number (``_unsure``),
        and the next flush writes it again only if the recorded number is lower. Batches are
        written in order, a failed one before any later one, so one key per process says."""
        pipe = self.link.slow.pipeline(transaction=True)
        pipe.set(self._k("ledger-batch", self._writer), batch, ex=LEDGER_SEQ_TTL_S)
        pipe.zadd(self._k("usage"), {_row_json(r): r.ts for r in rows})
        for r in rows:
            if r.tier_served is None:
                continue
            day = time.strftime("%Y-%m-%d", time.gmtime(r.ts))
            for key in (self._k("tot", r.api_key, r.tier_served),
                        self._k("totd", day, r.api_key, r.tier_served)):
                pipe.hincrby(key, "requests", 1)
                for f in TOTAL_FIELDS[1:-1]:
                    if v := getattr(r, f):
                        pipe.hincrby(key, f, int(v))
                pipe.hincrbyfloat(key, "cost_usd", float(r.cost_usd))
            pipe.sadd(self._k("tot-index"), _SEP.join((r.api_key, r.tier_served)))
            pipe.sadd(self._k("totd-index"), _SEP.join((day, r.api_key, r.tier_served)))
        try:
            await self.link.call("flush", pipe.execute)
        except BaseException:
            self._unsure = (batch, rows)  # applied or not: the recorded number says
            raise
        self.rows_written += len(rows)

    async def _retry_unsure(self) -> None:
        """The batch whose write failed, if any: counted if Redis applied it after all (the
        recorded number reached its), else written again under the same number."""
        if self._unsure is None:
            return
        batch, rows = self._unsure
        key = self._k("ledger-batch", self._writer)
        last = await self.link.call("flush", functools.partial(self.link.slow.get, key))
        self._unsure = None
        if last is not None and int(last) >= batch:
            self.rows_written += len(rows)
        else:
            await self._write_batch(batch, rows)

    async def usage_totals(self, *, per_day: bool = False, api_key: str | None = None,
                           since: float | None = None) -> list[UsageTotal]:
        await self.flush()
        if since is not None:  # a time window: summed from the rows themselves
            return sum_rows(await self.usage_rows(since=since, limit=10**9), per_day, api_key)
        return await self.link.call("usage", lambda: self._totals(per_day, api_key))

    async def _totals(self, per_day: bool, api_key: str | None) -> list[UsageTotal]:
        bg = self.link.slow
        index = self._k("totd-index" if per_day else "tot-index")
        members = sorted(_str(m) for m in await bg.smembers(index))
        out = []
        for member in members:
            parts = member.split(_SEP)
            day: str | None = parts[0] if per_day else None
            key, tier = parts[-2], parts[-1]
            if api_key is not None and key != api_key:
                continue
            h = await bg.hgetall(self._k("totd", day, key, tier) if day is not None else
                                 self._k("tot", key, tier))
            vals = {_str(k): float(v) for k, v in h.items()}
            counts = {f: int(vals.get(f, 0)) for f in TOTAL_FIELDS[:-1]}
            out.append(UsageTotal(key, tier, day, cost_usd=vals.get("cost_usd", 0.0), **counts))
        return out

    async def usage_rows(self, *, since: float | None = None,
                         limit: int = 10_000) -> list[UsageRow]:
        await self.flush()
        bg = self.link.slow
        raw = await self.link.call("usage", lambda: bg.zrangebyscore(
            self._k("usage"), since or 0.0, "+inf", start=0, num=limit))
        return [UsageRow.from_dict(orjson.loads(_str(x))) for x in raw]

    # -- buckets ----------------------------------------------------------------------------

    def take_all(self, wants: Sequence[Want], now: float) -> list[Take]:
        raise TypeError("RedisState: buckets are in Redis; await take_all_async (a blocking "
                        "call would hold the event loop for as long as Redis does)")

    async def take_all_async(self, wants: Sequence[Want], now: float) -> list[Take]:
        """One script over all the buckets: one round trip, atomic across them, bounded by
        ``timeout_s``; ``StateUnavailable`` when Redis does not answer."""
        r = self.link.fast
        keys = [self._k("bucket", name) for name, _, _, _ in wants]
        args = [x for _, amount, rate, burst in wants for x in (amount, rate, burst)]

        async def take() -> Any:
            try:
                return await r.evalsha(self._take_sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:  # Redis restarted and forgot the script
                self._take_sha = await r.script_load(_TAKE)
                return await r.evalsha(self._take_sha, len(keys), *keys, *args)

        taken, *levels = await self.link.call("take", take)
        return takes_after(wants, [float(x) for x in levels], bool(taken))

    # -- stored responses -------------------------------------------------------------------

    def room(self) -> None:
        """Refuse a new turn (503) while ``pending_max`` writes wait for Redis."""
        waiting = len(self.writes) + self.rows_pending
        if waiting >= self.pending_max:
            raise StateUnavailable(self.health.backend, detail=(
                f"The gateway holds {waiting} writes its shared state (Redis) has not taken "
                f"yet, its limit ([state] pending_max = {self.pending_max}). Retry shortly."))

    def enqueue(self, entry: Entry) -> None:
        """Hand a write to the one write path; the writer sends it now (not at the next
        flush), and it stays in memory until Redis has it."""
        self.writes.put(entry)
        self._wake.set()

    def put_response(self, item: StoredResponse) -> None:
        self._cache.keep(item)
        key, raw = self._k("resp", item.id), item.encode()
        self.enqueue(Entry("resp:" + item.id, item,
                           lambda pipe: pipe.set(key, raw, ex=self.response_ttl_s)))

    async def _response_writer(self) -> None:
        """Writes what is pending as it comes, every pending entry in one pipeline: one
        connection and about one round trip of delay, however many turns end at once. What
        fails waits for the background task's next flush (after Redis is back)."""
        while not self._closing.is_set():
            await self._wake.wait()
            self._wake.clear()
            if self._closing.is_set():
                return  # close() writes what is left
            with contextlib.suppress(StateUnavailable):  # counted and logged by `health`
                await self._write_pending()

    async def _write_pending(self) -> None:
        """Every pending entry, oldest first, in one pipeline; they leave the queue only once
        it succeeded (a failure keeps them all, in order, for the next try)."""
        async with self.writes.lock:
            entries = self.writes.batch()
            if not entries or not self.link.opened:
                return
            pipe = self.link.slow.pipeline(transaction=False)
            for entry in entries:
                entry.write(pipe)
            await self.link.call("write", pipe.execute)
            self.writes.landed(entries)

    def cached_response(self, rid: str) -> StoredResponse | None:
        return self._cache.get(rid)

    async def get_response(self, rid: str) -> StoredResponse | None:
        """A stored response, from this process's cache or Redis. A miss is asked again a few
        times over ~1 s (``RESPONSE_WAITS_S``) before it is one: the gateway that answered
        writes its response to Redis a moment after the answer (a writer task, off the
        request's path), and a client that continues at once on another gateway can get here
        first. Only an id nobody stored pays the wait (its 4xx comes ~1 s later)."""
        hit = self._cache.get(rid) or self.writes.get("resp:" + rid)
        if hit is not None or not self.link.opened:
            return hit
        key, r = self._k("resp", rid), self.link.fast
        raw = await self.link.call("get_response", lambda: r.get(key))
        for wait in RESPONSE_WAITS_S:
            if raw is not None:
                break
            await asyncio.sleep(wait)
            raw = await self.link.call("get_response", lambda: r.get(key))
        if raw is None:
            return None
        item = StoredResponse.decode(raw)
        self._cache.keep(item)
        return item

    async def delete_response(self, rid: str) -> bool:
        async with self.writes.lock:  # never raced by a write that would bring it back
            deleted = 0 if not self.link.opened else await self.link.call(
                "delete_response", lambda: self.link.fast.delete(self._k("resp", rid)))
            pending = self.writes.discard("resp:" + rid)
        known = self._cache.pop(rid, None) is not None
        return known or pending or deleted > 0

    # -- settings ---------------------------------------------------------------------------

    async def _refresh_settings(self) -> None:
        self._settings = await self.link.call("settings", self._read_settings)

    async def _read_settings(self) -> dict[str, dict[tuple[str, str], Any]]:
        bg = self.link.slow
        fresh: dict[str, dict[tuple[str, str], Any]] = {}
        for ns in await bg.smembers(self._k("settings-index")):
            name = _str(ns)
            h = await bg.hgetall(self._k("settings", name))
            values: dict[tuple[str, str], Any] = {}
            for k, v in h.items():
                scope, _, key = _str(k).partition(_SEP)
                values[(scope, key)] = orjson.loads(_str(v))
            fresh[name] = values
        return fresh

    async def put_setting(self, namespace: str, scope: str, name: str, value: Any) -> None:
        raw = orjson.dumps(value)
        if self.link.opened:
            pipe = self.link.slow.pipeline(transaction=True)
            pipe.hset(self._k("settings", namespace), _SEP.join((scope, name)), raw)
            pipe.sadd(self._k("settings-index"), namespace)
            await self.link.call("settings", pipe.execute)
        self._settings.setdefault(namespace, {})[(scope, name)] = orjson.loads(raw)

    async def delete_settings(self, namespace: str, scope: str | None = None,
                              name: str | None = None) -> int:
        current = self._settings.get(namespace, {})
        doomed = [k for k in current
                  if (scope is None or k[0] == scope) and (name is None or k[1] == name)]
        if doomed and self.link.opened:
            names, bg = [_SEP.join(k) for k in doomed], self.link.slow
            await self.link.call("settings", lambda: bg.hdel(self._k("settings", namespace),
                                                              *names))
        for k in doomed:
            current.pop(k, None)
        return len(doomed)

    def settings(self, namespace: str, scope: str | None = None) -> dict[tuple[str, str], Any]:
        current = self._settings.get(namespace, {})
        if scope is None:
            return dict(current)
        return {k: v for k, v in current.items() if k[0] == scope}

