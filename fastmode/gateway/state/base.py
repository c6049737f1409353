"""The state several gateway processes must share, behind one interface.

Four kinds of state, each with the consistency it needs and no more:

* **usage ledger** — one ``UsageRow`` per request. ``append_usage`` is called on the hot path
  (settlement) and must not block or do I/O: the backend buffers rows and writes them in
  batches from a background task. A row handed to ``append_usage`` must be durable (survive a
  ``kill -9`` of the process) within ``flush_interval_s`` plus the time of one batch write —
  at most about one second. Queries (``usage_totals``, ``usage_rows``) first flush what this
  process has buffered, so a process reads its own writes; rows of *other* processes may lag by
  their flush interval. Rows are never updated or deleted.
* **rate-limit buckets** — token buckets (``rate_per_s`` refill, ``burst`` capacity).
  ``take_all`` takes an amount from each of several buckets (a key's requests, tokens, input
  and output tokens of one tier) all or nothing, atomically: two concurrent requests never both
  spend the same tokens, and a request refused by one bucket spends nothing from the others.
  A turn awaits ``take_all_async`` just before admission (``gateway.pipeline.ratelimit``): the
  single-process backend answers from memory at once (``take_all``, synchronous, no I/O);
  Redis runs one script over all the buckets on its asyncio client: one round trip per
  request, bounded by ``[state] timeout_s``, never blocking the event loop
  (``bench/redis_state.py`` measures what Redis costs a request in all). Buckets may be lost on
  restart (they refill).
* **availability** — ``health`` (``gateway.state.health``): a store that can fail (Redis)
  raises ``StateUnavailable`` (a 503) from any call it cannot answer, fails fast while it is
  known to be down, and logs one line per outage. Write-behind data (ledger rows, and every
  stored kind through one write path: ``gateway.state.write_queue``) stays buffered in memory
  meanwhile, readable, and is written in order when the store is back; ``room`` refuses new
  turns (503) once ``[state] pending_max`` writes wait.
* **stored responses** — for ``previous_response_id`` and ``GET/DELETE /v1/responses/{id}``.
  ``put_response`` is write-behind (non-blocking, same durability as ledger rows);
  ``get_response`` is async and must see every response put by any process once it is durable;
  ``cached_response`` is the synchronous, memory-only read that request translation uses after
  the pipeline awaited ``get_response`` (a miss there is a true miss).
  Each keeps its owner (the key id of the key that made it) in its stored form; the backends
  return it as stored, and ``gateway.stored.response_store`` (the one layer above every backend)
  shows an object only to its owner.
* **settings** (fault rules, admin switches) — small JSON values keyed by
  ``(namespace, scope, name)``; ``scope`` is e.g. a test id so parallel tests don't see each
  other's rules. Writes are awaited and atomic per key; ``settings`` reads are synchronous and
  served from memory (hot path). A multi-process backend refreshes its copy from the others'
  writes within ``flush_interval_s`` (pub/sub or polling).

``start`` loads what must be in memory; ``close`` flushes everything and releases the store.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import orjson

from fastmode.gateway.money import cost
from fastmode.gateway.state.health import StateHealth

# how a request ended (UsageRow.ended)
COMPLETED = "completed"  # the whole reply reached the client
CANCELLED = "cancelled"  # the client went away or cancelled: billed for the tokens it received
CUT = "cut"  # the server cut the stream (a reader too slow, an injected `cut` fault)
FAILED = "failed"  # an error after the first byte (error event, injected error-event)
REJECTED = "rejected"  # refused before any work (rate limit, overload, an injected status)
SHUTDOWN = "shutdown"  # ended by a graceful shutdown's grace period
ENDINGS = (COMPLETED, CANCELLED, CUT, FAILED, REJECTED, SHUTDOWN)


@dataclass
class UsageRow:
    """One request in the ledger. Token counts are what was billed (see docs/tenants.md)."""

    request_id: str
    ts: float  # unix time when the request was settled
    api_key: str  # the key's id (gateway.ownership.key_id), never the key; "" when auth is off
    model: str
    tier_requested: str
    tier_served: str | None  # None: never admitted (rejected)
    protocol: str  # chat | responses | messages
    transport: str  # http | sse | websocket
    status: int  # HTTP status the client saw (or the websocket error's status)
    ended: str  # one of ENDINGS
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0  # billed output tokens (reasoning included)
    reasoning_tokens: int = 0
    generated_tokens: int = 0  # tokens the engine produced before it saw the end
    cost_usd: float = 0.0
    fault: str | None = None  # the injected fault kind, if any
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> UsageRow:
        """A row as stored: a field the row was written without (a ledger older than the
        field) takes its default, so old and new rows sum together."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


TOTAL_FIELDS = ("requests", "input_tokens", "cached_input_tokens", "output_tokens",
                "reasoning_tokens", "cost_usd")


@dataclass
class UsageTotal:
    """Totals of the admitted requests of one API key on one tier (and one day, if asked)."""

    api_key: str
    tier: str
    day: str | None = None  # "YYYY-MM-DD" (UTC) in a per-day breakdown
    requests: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cost_usd"] = cost(self.cost_usd)  # a sum of nano-dollar amounts, without noise
        if self.day is None:
            del out["day"]
        return out


@dataclass
class Take:
    """The answer of a bucket: whether the amount was taken, and what the headers report."""

    allowed: bool
    remaining: float  # tokens left after this take (or now, when refused)
    reset_s: float  # seconds until the bucket is full again
    retry_after_s: float = 0.0  # when refused: seconds until the amount is available


Want = tuple[str, float, float, float]
"""What admission asks of one bucket: (name, amount, refill rate per s, burst)."""


def takes_after(wants: Sequence[Want], levels: Sequence[float], taken: bool) -> list[Take]:
    """The answer of ``take_all`` from each bucket's level after it (``taken``: every amount
    was taken), or, refused, as it is."""
    out = []
    for (_, amount, rate, burst), level in zip(wants, levels, strict=True):
        reset = (burst - level) / rate
        if taken:
            out.append(Take(True, level, reset))
        else:
            wait = 0.0 if amount <= level else (
                (amount - level) / rate if amount <= burst else float("inf"))
            out.append(Take(False, level, reset, wait))
    return out


def take_in_memory(buckets: dict[str, list[float]], wants: Sequence[Want],
                   now: float) -> list[Take]:
    """``take_all`` on buckets kept in this process (name -> [level, stamp])."""
    levels = []
    for name, _, rate, burst in wants:
        b = buckets.get(name)
        if b is None:
            b = buckets[name] = [burst, now]
        b[0] = min(burst, b[0] + max(0.0, now - b[1]) * rate)
        b[1] = now
        levels.append(b[0])
    taken = all(amount <= level for (_, amount, _, _), level in zip(wants, levels, strict=True))
    if taken:
        for i, (name, amount, _, _) in enumerate(wants):
            levels[i] = buckets[name][0] = levels[i] - amount
    return takes_after(wants, levels, taken)


@dataclass
class StoredResponse:
    """What a later turn needs from an earlier response to continue it (and what
    ``GET /v1/responses/{id}`` shows)."""

    id: str
    model: str
    messages: list[dict[str, Any]]  # the whole conversation, the reply included
    context_tokens: int  # prompt + output tokens of that response: cached for the next turn
    body: dict[str, Any] | None = field(default=None)  # the response object, when kept
    # the key id of the API key that made it (gateway.ownership; None: no owner, auth off)
    owner: str | None = None
    # tools the conversation's input items declared (Responses ``additional_tools``): still
    # declared for a turn that continues it, as they are part of its context
    tools: list[dict[str, Any]] = field(default_factory=list)

    def encode(self) -> bytes:
        """The stored form, the same in every backend; the owner is kept in the record itself,
        so no backend can return an object without it."""
        return orjson.dumps({"id": self.id, "model": self.model, "messages": self.messages,
                             "context_tokens": self.context_tokens, "body": self.body,
                             "owner": self.owner, "tools": self.tools})

    @classmethod
    def decode(cls, raw: bytes | str) -> StoredResponse:
        d = orjson.loads(raw)
        return cls(d["id"], d["model"], d["messages"], d["context_tokens"], d.get("body"),
                   d.get("owner"), d.get("tools") or [])


class ResponseCache(OrderedDict[str, StoredResponse]):
    """The most recent responses in memory, least recently kept dropped first."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def keep(self, item: StoredResponse) -> None:
        self[item.id] = item
        self.move_to_end(item.id)
        while len(self) > self.capacity:
            self.popitem(last=False)


class StateBackend(ABC):
    """Shared gateway state; see the module docstring for the contract."""

    flush_interval_s: float = 0.25
    health: StateHealth  # whether the store answers (gateway.state.health); set per instance

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open the store and load what is served from memory."""

    @abstractmethod
    async def close(self) -> None:
        """Flush every buffered write and release the store."""

    def room(self) -> None:  # noqa: B027 - a store that cannot be away has no cap
        """Before a turn: raise ``StateUnavailable`` (503) when the writes waiting for the
        store reached their cap (a remote store that is away); a local store always has room."""

    # -- usage ledger -----------------------------------------------------------------------

    @abstractmethod
    def append_usage(self, row: UsageRow) -> None:
        """Buffer one ledger row (non-blocking; durable within about a second)."""

    @abstractmethod
    async def flush(self) -> None:
        """Write every buffered row and response now."""

    @abstractmethod
    async def usage_totals(self, *, per_day: bool = False, api_key: str | None = None,
                           since: float | None = None) -> list[UsageTotal]:
        """Totals of admitted requests per (key, tier[, day]), flushed writes included."""

    @abstractmethod
    async def usage_rows(self, *, since: float | None = None,
                         limit: int = 10_000) -> list[UsageRow]:
        """Raw ledger rows, oldest first (for audits and tests)."""

    # -- rate-limit buckets -----------------------------------------------------------------

    @abstractmethod
    def take_all(self, wants: Sequence[Want], now: float) -> list[Take]:
        """Take each amount from its bucket if every bucket has it, else nothing (atomically);
        one ``Take`` per want, in order. ``now`` is monotonic s (Redis uses its own clock).
        Synchronous: only a backend that keeps its buckets in this process answers it."""

    async def take_all_async(self, wants: Sequence[Want], now: float) -> list[Take]:
        """``take_all`` where the buckets may be remote (what a turn awaits); raises
        ``StateUnavailable`` when the store does not answer."""
        return self.take_all(wants, now)

    def take(self, bucket: str, amount: float, rate_per_s: float, burst: float,
             now: float) -> Take:
        """``take_all`` of one bucket."""
        return self.take_all([(bucket, amount, rate_per_s, burst)], now)[0]

    # -- stored responses -------------------------------------------------------------------

    @abstractmethod
    def put_response(self, item: StoredResponse) -> None:
        """Keep a response (write-behind)."""

    @abstractmethod
    async def get_response(self, rid: str) -> StoredResponse | None:
        """A stored response from any process (loads it into the memory cache)."""

    @abstractmethod
    def cached_response(self, rid: str) -> StoredResponse | None:
        """The memory-only read, after ``get_response`` was awaited."""

    @abstractmethod
    async def delete_response(self, rid: str) -> bool:
        """Forget a response; False if it was unknown."""

    async def reload_response(self, rid: str) -> StoredResponse | None:
        """``get_response`` past this process's memory: for a response another process is
        still updating (a background response's status, ``gateway.endpoints.background``)."""
        cache = getattr(self, "_cache", None)
        if isinstance(cache, ResponseCache):
            cache.pop(rid, None)
        return await self.get_response(rid)

    # -- settings (fault rules, admin switches) ---------------------------------------------

    @abstractmethod
    async def put_setting(self, namespace: str, scope: str, name: str, value: Any) -> None:
        """Set one JSON value (atomic per key)."""

    @abstractmethod
    async def delete_settings(self, namespace: str, scope: str | None = None,
                              name: str | None = None) -> int:
        """Delete one key, one scope, or a whole namespace; returns how many were deleted."""

    @abstractmethod
    def settings(self, namespace: str, scope: str | None = None) -> dict[tuple[str, str], Any]:
        """``{(scope, name): value}`` of a namespace (or one scope), from memory."""


def sum_rows(rows: list[UsageRow], per_day: bool, api_key: str | None) -> list[UsageTotal]:
    """Totals per (key, tier[, day]) summed from ledger rows (a time window's totals)."""
    acc: dict[tuple[str, str, str | None], UsageTotal] = {}
    for r in rows:
        if r.tier_served is None or (api_key is not None and r.api_key != api_key):
            continue
        day = time.strftime("%Y-%m-%d", time.gmtime(r.ts)) if per_day else None
        t = acc.setdefault((r.api_key, r.tier_served, day),
                           UsageTotal(r.api_key, r.tier_served, day))
        t.requests += 1
        t.input_tokens += r.input_tokens
        t.cached_input_tokens += r.cached_input_tokens
        t.output_tokens += r.output_tokens
        t.reasoning_tokens += r.reasoning_tokens
        t.cost_usd += r.cost_usd
    return [acc[k] for k in sorted(acc, key=lambda k: (k[0], k[1], k[2] or ""))]
