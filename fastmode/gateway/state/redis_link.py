"""The connection of the Redis state backend: bounded asyncio clients behind one breaker.

Every call to Redis goes through ``RedisLink.call``: refused at once while Redis is known to be
down, bounded by a timeout otherwise, and a failure counted, logged once per outage and raised
as ``StateUnavailable`` (a 503) by ``StateHealth``. Two clients, so that a large background
write never holds the short timeout of a request's path (nor the reverse):

- ``fast``: the request path (bucket takes, stored-response reads, the probe), ``timeout_s``;
- ``slow``: the background and the admin (ledger and response writes, settings, usage
  queries), ``max(BACKGROUND_TIMEOUT_S, timeout_s)``.

Each has a blocking pool of ``POOL_SIZE`` connections (a hung Redis gets no more than that from
us; waiting for a free one is bounded by the same timeout) and no retries of its own (redis-py
retries three times with backoff by default: seconds per call while Redis is away).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from fastmode.gateway.state.health import StateHealth

T = TypeVar("T")

BACKGROUND_TIMEOUT_S = 5.0  # ledger batches, usage queries: larger replies, nobody waiting
POOL_SIZE = 64
# what a call that Redis did not answer raises (redis-py wraps socket errors; OSError for what
# it does not)
FAILURES = (redis.exceptions.RedisError, OSError)


def bounded_client(url: str, timeout_s: float) -> aioredis.Redis:
    """An asyncio client whose every wait is bounded by ``timeout_s``: connecting, each reply,
    and a free connection of its pool."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=POOL_SIZE, timeout=timeout_s, socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0))
    return aioredis.Redis.from_pool(pool)


class RedisLink:
    """The two clients of one Redis, and the breaker (``health``) around every call."""

    def __init__(self, url: str, timeout_s: float, health: StateHealth) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.health = health
        self._fast: aioredis.Redis | None = None
        self._slow: aioredis.Redis | None = None

    def open(self) -> None:
        """Make the clients (they connect on first use)."""
        self._fast = bounded_client(self.url, self.timeout_s)
        self._slow = bounded_client(self.url, max(BACKGROUND_TIMEOUT_S, self.timeout_s))

    @property
    def opened(self) -> bool:
        return self._fast is not None

    @property
    def fast(self) -> aioredis.Redis:
        assert self._fast is not None, "RedisState.start() was not awaited"
        return self._fast

    @property
    def slow(self) -> aioredis.Redis:
        assert self._slow is not None, "RedisState.start() was not awaited"
        return self._slow

    async def aclose(self) -> None:
        for client in (self._fast, self._slow):
            if client is not None:
                await client.aclose()
        self._fast = self._slow = None

    async def call(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        """One call to Redis (``op`` names it in the metrics and the outage's log line)."""
        self.health.guard(op)
        try:
            return await call()
        except FAILURES as exc:
            raise self.health.failed(op, exc) from None

    async def probe(self) -> bool:
        """During an outage: does Redis answer again? Closes the breaker when it does, after
        dropping the idle pooled connections: those opened before the outage may lead to a
        Redis that is gone (a restart), and the first call on one would fail again."""
        try:
            await self.fast.ping()
            for client in (self.fast, self.slow):
                await client.connection_pool.disconnect(inuse_connections=False)
        except FAILURES:
            return False
        self.health.answered()
        return True
