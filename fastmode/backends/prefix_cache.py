"""Prefix caching: a replica keeps the KV of prompt prefixes it computed, so a later prompt that
starts the same way skips their prefill.

The model is vLLM's automatic prefix caching and SGLang's radix cache, cut at *checkpoints*
rather than at every 16-token block, because the providers bill in such steps: OpenAI caches a
prompt's prefix in 128-token steps from 1,024 tokens on; Anthropic caches the prefix up to each
``cache_control`` breakpoint and looks for hits at the content-block boundaries before it. A
request carries a ``PrefixKey``: its checkpoints (token positions, ascending), the hash of the
prompt up to each, which of them may be written, and how long a written one lives. The gateway
builds keys from the wire request (``gateway.values.caching``), the simulator from its synthetic
conversations; the engine only compares hashes.

``PrefixCache`` is pure (no clock: the caller passes ``now``) and bounded by memory the
scheduler gives it, never by a count of its own:

- entries form chains: an entry covers the tokens from its parent's checkpoint to its own, so
  the KV it holds is ``tokens - parent.tokens`` and a chain's total is its last checkpoint;
- a running sequence pins the chain it reads (and the one it wrote once its prefill is done):
  pinned KV is memory in use, shared by every sequence that reads it;
- an unpinned entry is free memory that still remembers something: the scheduler evicts the
  least recently used ones when a new sequence needs room (under pressure), and an entry whose
  time to live has passed is a miss. Evicting an entry evicts its descendants, which could no
  longer be read without it; a chain is touched leaf first, so leaves are evicted before roots.

Every operation is O(checkpoints of the request) or O(entries evicted).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

_INF = float("inf")


@dataclass(frozen=True, slots=True)
class PrefixKey:
    """Where a prompt may be cut and cached, and what each cut is called.

    ``points`` are token positions (ascending), ``hashes`` the hash of the prompt up to each,
    ``writable`` whether the engine stores that checkpoint once it computed it (Anthropic only
    writes at breakpoints; the others are read-only block boundaries), ``ttl_s`` how long a
    written checkpoint lives unused. A hit shorter than ``min_tokens`` is no hit (OpenAI and
    Anthropic cache nothing under 1,024 tokens). ``bill_writes``: the provider bills cache
    writes (Anthropic's ``cache_creation_input_tokens``); ``affinity`` is a routing hint
    (OpenAI's ``prompt_cache_key``) for requests that share a prefix nobody holds yet.
    """

    points: tuple[int, ...]
    hashes: tuple[int, ...]
    writable: tuple[bool, ...]
    ttl_s: tuple[float, ...]
    min_tokens: int = 0
    bill_writes: bool = False
    affinity: int | None = None
    # vLLM's blocks (``backends.block_hash``): each checkpoint is one block of this many
    # tokens, and ``tokens`` the prompt's ids the KV events report (0 / None: checkpoints)
    block_size: int = 0
    tokens: tuple[int, ...] | None = None
    lora_id: int | None = None  # the LoRA adapter's int id its blocks are stored under

    def __post_init__(self) -> None:
        n = len(self.points)
        if not (len(self.hashes) == len(self.writable) == len(self.ttl_s) == n):
            raise ValueError("PrefixKey: points, hashes, writable and ttl_s differ in length")

    @property
    def empty(self) -> bool:
        return not self.points

    def writes(self, hit: int, prompt_tokens: int) -> tuple[int, int]:
        """Tokens a request that hit ``hit`` tokens writes to the cache, and how many of them
        go to long-lived (over 5 minutes) checkpoints: Anthropic bills those at 2x input and the
        others at 1.25x. Zero unless the key bills writes."""
        if not self.bill_writes:
            return 0, 0
        last = long_last = hit
        for p, w, ttl in zip(self.points, self.writable, self.ttl_s, strict=True):
            if w and hit < p < prompt_tokens and p >= self.min_tokens:
                last = p
                if ttl > 300:
                    long_last = p
        return last - hit, long_last - hit


@dataclass(eq=False, slots=True)
class _Entry:
    key: int  # the hash of the prompt up to ``tokens``
    tokens: int  # checkpoint position: the chain up to here holds this many tokens of KV
    size: int  # tokens of KV this entry holds itself: ``tokens - parent.tokens``
    parent: _Entry | None
    ttl_s: float
    expires: float = _INF
    refs: int = 0  # running sequences reading (or having written) a chain through this entry
    children: list[_Entry] = field(default_factory=list)


@dataclass
class CacheStats:
    """Counters since start (what ``/metrics`` and ``simulate`` report)."""

    queries: int = 0  # lookups
    hits: int = 0  # lookups that found a cached prefix
    query_tokens: int = 0  # prompt tokens looked up
    hit_tokens: int = 0  # prompt tokens found cached
    written_tokens: int = 0  # tokens of KV stored
    evicted_tokens: int = 0  # tokens of KV evicted under memory pressure or expired


class CacheListener(Protocol):
    """What happens to a cache's blocks, as vLLM's KV events report it (entries of keys with
    ``tokens``: vLLM's blocks). Hashes are the entries' keys."""

    def stored(self, hashes: list[int], parent: int | None, token_ids: list[int],
               block_size: int, lora_id: int | None = None) -> None: ...

    def removed(self, hashes: list[int]) -> None: ...

    def cleared(self) -> None: ...


class PrefixCache:
    """One replica's cached prefixes; see the module docstring."""

    listener: CacheListener | None = None  # told of stored / removed blocks (KV events)

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._free: OrderedDict[int, _Entry] = OrderedDict()  # unpinned entries, LRU first
        self.size = 0  # tokens of KV held, pinned or not
        self.pinned = 0  # tokens of KV pinned by running sequences
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def evictable(self) -> int:
        return self.size - self.pinned

    # -- reading ----------------------------------------------------------------------------

    def _find(self, key: PrefixKey, limit: int, now: float) -> _Entry | None:
        """The longest live cached checkpoint of ``key`` below ``limit`` tokens."""
        entries = self._entries
        for i in range(len(key.points) - 1, -1, -1):
            p = key.points[i]
            if p >= limit:
                continue
            if p < key.min_tokens:
                return None
            e = entries.get(key.hashes[i])
            if e is not None and e.tokens == p:
                if e.refs == 0 and e.expires < now:
                    self._remove(e)  # expired: a miss, and its memory is free again
                    continue
                return e
        return None

    def peek(self, key: PrefixKey, limit: int, now: float) -> int:
        """Tokens of ``key`` that are cached (below ``limit``), without counting a query."""
        e = self._find(key, limit, now)
        return e.tokens if e is not None else 0

    def lookup(self, key: PrefixKey, prompt_tokens: int, now: float) -> _Entry | None:
        """Count a query for a prompt of ``prompt_tokens`` and return its longest cached chain
        (at least one prompt token is always left to prefill). Pin it with ``acquire``."""
        e = self._find(key, prompt_tokens, now)
        s = self.stats
        s.queries += 1
        s.query_tokens += prompt_tokens
        if e is not None:
            s.hits += 1
            s.hit_tokens += e.tokens
        return e

    # -- pinning ----------------------------------------------------------------------------

    def acquire(self, entry: _Entry, now: float) -> None:
        """A running sequence reads the chain ending at ``entry``: pin it, refresh it."""
        e: _Entry | None = entry
        free = self._free
        while e is not None:
            if e.refs == 0:
                self.pinned += e.size
                free.pop(e.key, None)
            e.refs += 1
            e.expires = max(e.expires, now + e.ttl_s)
            e = e.parent

    def release(self, entry: _Entry, now: float) -> None:
        """The sequence that pinned the chain ending at ``entry`` left the batch.

        The chain becomes evictable, leaf first: the leaf goes to the LRU end before its
        parents, so memory pressure takes the longest (least shared) suffixes first."""
        e: _Entry | None = entry
        free = self._free
        while e is not None:
            e.refs -= 1
            e.expires = max(e.expires, now + e.ttl_s)
            if e.refs == 0:
                self.pinned -= e.size
                free[e.key] = e
                free.move_to_end(e.key)
            e = e.parent

    # -- writing ----------------------------------------------------------------------------

    def insert(self, key: PrefixKey, hit: _Entry | None, limit: int,
               now: float) -> tuple[_Entry | None, int]:
        """Store the writable checkpoints of ``key`` beyond ``hit`` (below ``limit`` tokens),
        once a sequence computed them. Returns the new chain's last entry, pinned for the
        sequence (``hit``'s pin is handed over to it), and the tokens of KV that moved from
        the sequence's own memory into the cache. A checkpoint someone else stored meanwhile
        is reused: the sequence's copy of those tokens stays its own."""
        parent = hit
        start = hit.tokens if hit is not None else 0
        moved = 0
        run: list[_Entry] = []  # new entries in a chain, for the listener
        tell = self.listener is not None and key.tokens is not None
        for p, h, w, ttl in zip(key.points, key.hashes, key.writable, key.ttl_s, strict=True):
            if not w or p <= start or p >= limit or p < key.min_tokens:
                continue
            e = self._entries.get(h)
            if e is None or e.tokens != p:
                if e is not None:  # a hash collision with another length: keep the older
                    continue
                base = parent.tokens if parent is not None else 0
                e = _Entry(h, p, p - base, parent, ttl, now + ttl)
                self._entries[h] = e
                if parent is not None:
                    parent.children.append(e)
                self.size += e.size
                moved += e.size
                if tell:
                    if run and run[-1] is not parent:
                        self._stored(run, key)
                        run = []
                    run.append(e)
            parent = e
        if run:
            self._stored(run, key)
        if parent is None or parent is hit:
            return hit, 0
        # the sequence now holds the new chain instead of the one it read (a reused entry's
        # chain may run through other checkpoints than ``hit``: pin first, then unpin)
        self.acquire(parent, now)
        if hit is not None:
            self.release(hit, now)
        self.stats.written_tokens += moved
        return parent, moved

    def _stored(self, run: list[_Entry], key: PrefixKey) -> None:
        assert self.listener is not None and key.tokens is not None
        first, last = run[0], run[-1]
        base = first.tokens - first.size
        parent = first.parent.key if first.parent is not None else None
        self.listener.stored([e.key for e in run], parent, list(key.tokens[base:last.tokens]),
                             key.block_size, key.lora_id)

    # -- a scheduler's sequences (backends.scheduler.Sequence) ------------------------------

    def attach(self, seq: Any) -> None:
        """A sequence arrives: find its longest cached prefix and pin it."""
        entry = self.lookup(seq.prefix, seq.prompt_tokens, seq.arrival)
        if entry is not None:
            self.acquire(entry, seq.arrival)
            seq.cache_entry = entry
            seq.cache_hit = entry.tokens
            seq.cached_tokens = max(seq.cached_tokens, entry.tokens)

    def detach(self, seq: Any, now: float) -> None:
        """A sequence left (finished or cancelled): its chain becomes evictable."""
        if seq.cache_entry is not None:
            self.release(seq.cache_entry, now)
            seq.cache_entry = None

    def store(self, seq: Any, now: float) -> int:
        """A sequence's prompt is computed: store its checkpoints. Returns the KV tokens that
        moved from the sequence's own memory into the cache."""
        seq.cache_entry, moved = self.insert(seq.prefix, seq.cache_entry, seq.prompt_tokens, now)
        seq.kv_held -= moved
        return moved

    def unpin_waiting(self, waiting: Iterable[Any], now: float) -> None:
        """Nothing runs and the head of the queue does not fit beside the cache that waiting
        sequences pinned: they would wait for each other forever. Their pins go (they will
        prefill those tokens after all; what was billed at arrival stands)."""
        for seq in waiting:
            if seq.cache_entry is not None:
                self.detach(seq, now)
                seq.cached_tokens = max(0, seq.cached_tokens - seq.cache_hit)
                seq.cache_hit = 0

    # -- eviction ---------------------------------------------------------------------------

    def evict(self, tokens: int) -> int:
        """Free at least ``tokens`` of KV from unpinned entries, least recently used first;
        returns the tokens freed (less when not enough is unpinned)."""
        freed = 0
        free = self._free
        while freed < tokens and free:
            freed += self._remove(next(iter(free.values())))
        return freed

    def drop_unpinned(self) -> int:
        """Free every unpinned entry (an engine put to sleep discards its KV cache); returns
        the tokens freed. With nothing pinned this is ``clear``."""
        if not self.pinned:
            freed = self.size
            self.clear()
            return freed
        return self.evict(self.size)

    def clear(self) -> None:
        """Forget every entry (``/reset_prefix_cache``); the caller checks none is pinned."""
        if self.pinned:
            raise ValueError("PrefixCache.clear: running sequences still pin entries")
        self.stats.evicted_tokens += self.size
        self._entries.clear()
        self._free.clear()
        self.size = 0
        if self.listener is not None:
            self.listener.cleared()

    def _remove(self, entry: _Entry) -> int:
        """Drop an unpinned entry and its descendants (unpinned too: a pin covers the whole
        chain up to the root). Returns the tokens freed."""
        freed = 0
        stack = [entry]
        gone: list[int] = []
        while stack:
            e = stack.pop()
            stack.extend(e.children)
            gone.append(e.key)
            del self._entries[e.key]
            self._free.pop(e.key, None)
            self.size -= e.size
            freed += e.size
        parent = entry.parent
        if parent is not None:
            parent.children.remove(entry)
        self.stats.evicted_tokens += freed
        if self.listener is not None:
            self.listener.removed(gone)
        return freed


@dataclass(frozen=True)
class CacheRouting:
    """How a deployment picks a replica for a request (cache-aware routers such as SGLang's or
    llm-d's prefix scorer do this): ``prefer_cached`` sends it to the replica holding the longest
    prefix of its prompt, among replicas whose outstanding work is at most ``max_imbalance``
    sequences above the least loaded one; otherwise (or with no hit anywhere) least loaded."""

    prefer_cached: bool = True
    max_imbalance: int = 16
