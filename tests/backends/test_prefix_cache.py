"""The prefix cache: pure bookkeeping (pins, LRU eviction, expiry), its place in the scheduler
(a hit skips prefill on the modeled clock and shares KV), and cache-aware routing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fastmode.backends.drivers import Arrival, VirtualDriver
from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.prefix_cache import CacheRouting, PrefixCache, PrefixKey
from fastmode.backends.prefix_workload import PromptPrefixes
from fastmode.backends.scheduler import Scheduler, Sequence
from fastmode.gateway.config import load_config

INF = float("inf")


def key(*points: int, base: str = "p", ttl: float = INF, writable: bool = True,
        min_tokens: int = 0) -> PrefixKey:
    """Checkpoints at ``points``; equal ``base`` and position give equal hashes."""
    n = len(points)
    return PrefixKey(points, tuple(hash((base, p)) for p in points), (writable,) * n,
                     (ttl,) * n, min_tokens=min_tokens)


def spec() -> EngineSpec:
    return build(load_config().sim())


# -- the cache alone ----------------------------------------------------------------------------


def test_lookup_finds_the_longest_stored_checkpoint_and_counts_the_query() -> None:
    c = PrefixCache()
    k = key(1000, 2000, 3000)
    entry, moved = c.insert(k, None, 2500, now=0.0)  # only checkpoints below the prompt's end
    assert entry is not None and entry.tokens == 2000 and moved == 2000
    assert c.size == 2000 and c.pinned == 2000  # the writer pins what it wrote
    c.release(entry, now=0.0)
    assert c.pinned == 0 and c.evictable == 2000
    hit = c.lookup(key(1000, 2000, 3000, 4000), 5000, now=1.0)
    assert hit is not None and hit.tokens == 2000
    assert (c.stats.queries, c.stats.hits, c.stats.hit_tokens) == (1, 1, 2000)
    assert c.lookup(key(1000, 2000, base="other"), 5000, now=1.0) is None
    assert c.stats.query_tokens == 10_000


def test_a_hit_never_covers_the_whole_prompt_and_min_tokens_is_respected() -> None:
    c = PrefixCache()
    e, _ = c.insert(key(1000, 2000), None, 5000, now=0.0)
    assert e is not None
    c.release(e, 0.0)
    assert c.peek(key(1000, 2000), 2000, 0.0) == 1000  # 2000 would leave nothing to prefill
    assert c.peek(key(1000, 2000, min_tokens=1500), 5000, 0.0) == 2000
    assert c.peek(key(1000, min_tokens=1500), 5000, 0.0) == 0


def test_eviction_takes_the_least_recently_used_leaves_first_and_skips_pinned() -> None:
    c = PrefixCache()
    a, _ = c.insert(key(100, 200, base="a"), None, 1000, now=0.0)
    b, _ = c.insert(key(100, 300, base="b"), None, 1000, now=0.0)
    assert a is not None and b is not None
    c.release(a, 1.0)  # a becomes evictable first (older)
    assert c.evict(50) == 100  # a's leaf (tokens 100..200) goes first
    assert c.size == 400 and c.peek(key(100, 200, base="a"), 1000, 2.0) == 100
    assert c.evict(10_000) == 100  # the rest of a; b is pinned and stays
    assert c.size == 300 and c.pinned == 300
    c.release(b, 2.0)
    assert c.evict(10_000) == 300 and c.size == 0 and len(c) == 0
    assert c.stats.evicted_tokens == 500


def test_expired_entries_miss_and_a_hit_refreshes_the_chain() -> None:
    c = PrefixCache()
    e, _ = c.insert(key(500, 1000, ttl=300.0), None, 2000, now=0.0)
    assert e is not None
    c.release(e, 0.0)
    hit = c.lookup(key(500, 1000, ttl=300.0), 2000, now=200.0)
    assert hit is not None and hit.tokens == 1000
    c.acquire(hit, 200.0)
    c.release(hit, 250.0)  # refreshed until 550
    assert c.peek(key(500, 1000, ttl=300.0), 2000, 500.0) == 1000
    assert c.peek(key(500, 1000, ttl=300.0), 2000, 600.0) == 0  # expired: a miss, and freed
    assert c.size == 0


def test_read_only_checkpoints_are_looked_up_but_not_written() -> None:
    c = PrefixCache()
    k = PrefixKey((1000, 2000), (1, 2), (False, True), (INF, INF))
    e, moved = c.insert(k, None, 3000, now=0.0)
    assert e is not None and e.tokens == 2000 and moved == 2000 and len(c) == 1


def test_anthropic_style_keys_bill_writes_up_to_the_last_breakpoint() -> None:
    k = PrefixKey((1000, 2000, 3000), (1, 2, 3), (True, False, True), (3600.0, 300.0, 300.0),
                  min_tokens=1024, bill_writes=True)
    assert k.writes(0, 5000) == (3000, 0)  # 1000 is below the minimum: not written
    assert k.writes(2000, 5000) == (1000, 0)
    long = replace(k, ttl_s=(3600.0, 3600.0, 3600.0))
    assert long.writes(0, 5000) == (3000, 3000)
    assert replace(k, bill_writes=False).writes(0, 5000) == (0, 0)


# -- in the scheduler ---------------------------------------------------------------------------


def first_token_time(sched: Scheduler, seq: Sequence, now: float = 0.0) -> float:
    assert sched.submit(seq)
    while seq.first_token_at < 0:
        result = sched.step(now)
        assert result is not None
        now = result.end
    while sched.has_work:
        result = sched.step(now)
        assert result is not None
        now = result.end
    return seq.first_token_at - seq.arrival


def test_a_cached_prefix_skips_its_prefill_on_the_modeled_clock() -> None:
    dep = spec().deployments["fast"]  # 512-token prefill chunks: a long prompt takes steps
    sched = dep.new_scheduler()
    k = key(*range(1024, 8000, 128))
    miss = first_token_time(sched, Sequence(1, 8000, 10, 0.0, prefix=k))
    t0 = sched.busy_until
    again = Sequence(2, 8000, 10, t0, prefix=k)
    hit = first_token_time(sched, again, t0)
    assert again.cache_hit == again.cached_tokens == 7936
    assert hit < miss / 5  # 64 tokens to prefill instead of 8000
    assert sched.cache is not None and sched.cache.stats.hit_tokens == 7936
    assert sched.kv_used_tokens == sched.background.kv_tokens  # nothing pinned once done


def test_without_prefix_caching_nothing_is_kept() -> None:
    dep = spec().deployments["fast"]
    sched = Scheduler(dep.placement, replace(dep.limits, prefix_caching=False), dep.background)
    k = key(*range(1024, 8000, 128))
    miss = first_token_time(sched, Sequence(1, 8000, 10, 0.0, prefix=k))
    t0 = sched.busy_until
    assert first_token_time(sched, Sequence(2, 8000, 10, t0, prefix=k), t0) == \
        pytest.approx(miss, rel=0.05)
    assert sched.cache is None


def test_shared_blocks_are_reserved_once_and_evicted_under_pressure() -> None:
    dep = spec().deployments["fast"]
    sched = dep.new_scheduler()
    cache = sched.cache
    assert cache is not None
    a = Sequence(1, 4000, 2, 0.0, prefix=key(3000))
    first_token_time(sched, a)
    assert cache.size == 3000 and cache.pinned == 0  # kept after the sequence finished
    b = Sequence(2, 4000, 50, sched.busy_until, prefix=key(3000))
    assert sched.submit(b)
    sched.step(sched.busy_until)
    # the prefix is shared: b holds the blocks of the rest of its prompt (its reply's come as
    # it decodes)
    assert b.kv_held == 4000 - 3000 and cache.pinned == 3000
    # a sequence that needs all the free memory evicts what is not pinned
    free = sched.kv_capacity - sched.background.kv_tokens - sched._kv_used - cache.size
    filler = Sequence(3, free + 2000, 1, sched.busy_until)  # b frees 1000 and more of it
    assert sched.submit(filler)
    sched.step(sched.busy_until)
    assert filler.state == "waiting"  # the pinned prefix cannot be evicted: it waits...
    while b.state != "finished":
        r = sched.step(sched.busy_until)
        assert r is not None
    sched.step(sched.busy_until)
    assert filler.state != "waiting" and cache.size == 0  # ...until b leaves; then evicted
    assert cache.stats.evicted_tokens == 3000


# -- routing ------------------------------------------------------------------------------------


def run_two(routing: CacheRouting) -> tuple[str, str]:
    """Two replicas; a long prompt, then a busy spell on its replica, then the prompt again:
    which replica serves each time."""
    s = spec()
    dep = replace(s.deployments["standard"], replicas=2, routing=routing)
    served: dict[int, str] = {}
    driver = VirtualDriver({"standard": dep})

    def first(seq: Sequence) -> None:
        for r in driver.replicas:
            if r.holds(seq):
                served[seq.tag] = r.name

    driver.on_first_token = first
    k = key(*range(1024, 6000, 128))
    arrivals = [
        Arrival(0.0, "standard", 6000, 5, tag=1, prefix=k),
        Arrival(1.0, "standard", 100, 5000, tag=2),  # busies replica 0 (tie: the first)
        Arrival(1.0, "standard", 100, 5000, tag=3),  # and replica 1
        Arrival(1.0, "standard", 100, 5000, tag=4),  # replica 0 again: now one busier
        Arrival(2.0, "standard", 6000, 5, tag=5, prefix=k),
    ]
    driver.run(arrivals, until=3.0)
    return served[1], served[5]


def test_routing_prefers_the_replica_holding_the_prefix() -> None:
    first, again = run_two(CacheRouting(prefer_cached=True, max_imbalance=4))
    assert again == first == "standard-0"


def test_least_loaded_routing_ignores_the_cache_and_the_imbalance_bound_holds() -> None:
    assert run_two(CacheRouting(prefer_cached=False)) == ("standard-0", "standard-1")
    assert run_two(CacheRouting(prefer_cached=True, max_imbalance=0)) == \
        ("standard-0", "standard-1")


# -- simulated workloads ------------------------------------------------------------------------


def test_conversations_carry_their_history_as_checkpoints() -> None:
    pp = PromptPrefixes(shared_tokens=1000, turns=3)
    p1, k1 = pp.request(0, "m", 200, 50, 100_000)
    p2, k2 = pp.request(0, "m", 100, 50, 100_000)
    p3, k3 = pp.request(0, "m", 100, 50, 100_000)
    p4, k4 = pp.request(0, "m", 100, 50, 100_000)  # a new conversation
    assert (p1, p2, p3, p4) == (1200, 1350, 1500, 1100)
    assert k1 is not None and k2 is not None and k3 is not None and k4 is not None
    assert k2.points[:2] == k1.points and k2.hashes[:2] == k1.hashes
    assert k3.points[:3] == k2.points
    assert k4.points[0] == 1000 and k4.hashes[1] != k2.hashes[1]
    assert PromptPrefixes().request(0, "m", 10, 10, 100)[1] is None


def test_prompt_cache_key_picks_a_home_replica_when_nobody_holds_the_prefix() -> None:
    s = spec()
    dep = replace(s.deployments["standard"], replicas=3, routing=CacheRouting())
    driver = VirtualDriver({"standard": dep})
    for home in range(3):
        k = replace(key(2000, base=f"new{home}"), affinity=home + 3 * 7)
        assert driver.choose("standard", k, 3000).name == f"standard-{home}"
    assert driver.choose("standard", None, 3000).name == "standard-0"  # least loaded


def test_simulate_reports_the_hit_rate_and_bills_cached_tokens() -> None:
    from fastmode.backends.simulate import LengthDist, Workload, WorkloadError, simulate

    s = spec()
    base = Workload(mix={"standard": 1.0}, prompt=LengthDist("fixed", 300),
                    output=LengthDist("fixed", 50), concurrency=8, duration=60.0, requests=200)
    plain = simulate(s, base).tiers["standard"]
    cached = simulate(s, replace(base, shared_prefix_tokens=2000, turns=5)).tiers["standard"]
    assert plain["prefix_cache_hit_rate"] == 0.0
    assert cached["prefix_cache_hit_rate"] > 0.6
    assert cached["cached_prompt_tokens"] > 0
    dep = s.deployments["standard"]
    off = replace(s, deployments={**s.deployments, "standard": replace(
        dep, limits=replace(dep.limits, prefix_caching=False))})
    off_tiers = {**s.tiers, "standard": replace(s.tiers["standard"],
                                                deployment=off.deployments["standard"])}
    uncached = simulate(replace(off, tiers=off_tiers),
                        replace(base, shared_prefix_tokens=2000, turns=5)).tiers["standard"]
    assert uncached["prefix_cache_hit_rate"] == 0.0
    assert cached["ttft_s"]["p50"] < uncached["ttft_s"]["p50"]  # the same prompts, less prefill
    p = s.tiers["standard"].prices
    full = cached["prompt_tokens"] * p.input + cached["output_tokens"] * p.output
    assert cached["cost_usd"] < full / 1e6  # cached input is cheaper
    with pytest.raises(WorkloadError):
        simulate(s, replace(base, concurrency=None, rate=1.0, turns=3))
