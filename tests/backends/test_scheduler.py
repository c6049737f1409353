"""Invariants of the continuous-batching scheduler under random workloads (fastmode/backends/scheduler.py).

A small replica (a few slots, little KV memory, a tight token budget) so that every limit binds:
the random workloads submit, cancel and step, and every step is checked against the rules.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastmode.backends.perf import Placement
from fastmode.backends.profiles import Catalog
from fastmode.backends.scheduler import (
    CANCELLED,
    DECODE,
    FINISHED,
    PREFILL,
    WAITING,
    Background,
    Limits,
    Scheduler,
    Sequence,
)

CAT = Catalog.builtin()
# llama-3.1-8b on one H100 with 30% of its memory: 24 GB - 16 GB of weights = ~60K KV tokens
PLACEMENT = Placement(CAT.get_model("llama-3.1-8b"), CAT.get_hardware("h100-sxm"), 1, "bf16", 0.3)


DEFAULT_BG = Background(2, 1000, 16)


# the same with 22%: ~20K KV tokens, which eight long requests outgrow as they decode
TIGHT = Placement(CAT.get_model("llama-3.1-8b"), CAT.get_hardware("h100-sxm"), 1, "bf16", 0.22)


def make(
    max_batch: int = 8,
    budget: int = 512,
    max_waiting: int = 6,
    bg: Background = DEFAULT_BG,
    placement: Placement = PLACEMENT,
) -> Scheduler:
    return Scheduler(placement, Limits(max_batch, budget, max_waiting), bg)


class Checker:
    """Runs a random workload on a scheduler and checks every step."""

    def __init__(self, sched: Scheduler, rng: random.Random) -> None:
        self.s = sched
        self.rng = rng
        self.now = 0.0
        self.next_id = 0
        self.accepted: list[Sequence] = []  # in submission order
        self.active: list[Sequence] = []  # accepted, neither finished nor cancelled
        self.order: dict[int, int] = {}  # seq id -> submission index
        self.finished_count: dict[int, int] = {}
        self.admitted_max = -1  # highest submission index ever admitted
        self.cancel_requested: set[int] = set()

    def submit(self, prompt: int, output: int, cached: int = 0) -> bool:
        s = self.s
        self.next_id += 1
        seq = Sequence(self.next_id, prompt, output, self.now, min(cached, prompt - 1))
        # max_waiting bounds the sequences that must wait for a slot: those a free slot will
        # take at the next step do not count against it
        free_slots = max(0, s.limits.max_batch - s.background.seqs - s.running)
        full = len(s.waiting) >= s.limits.max_waiting + free_slots
        ok = s.submit(seq)
        assert ok == (not full), "overflow of max_waiting must be refused, and only then"
        if ok:
            self.order[seq.id] = len(self.accepted)
            self.accepted.append(seq)
            self.active.append(seq)
        return ok

    def cancel_random(self) -> None:
        live = [q for q in self.active if q.state not in (FINISHED, CANCELLED)]
        if live:
            seq = self.rng.choice(live)
            self.cancel_requested.add(seq.id)
            self.s.cancel(seq)

    def step(self) -> bool:
        s = self.s
        active = self.active
        before = {q.id: (q.state, q.prefilled) for q in active}
        preempted_before = s.preemptions
        cancel_pending = [
            q for q in active if q.id in self.cancel_requested and q.state in (PREFILL, DECODE)
        ]
        result = s.step(self.now)
        for q in cancel_pending:  # a cancelled sequence leaves at the next step
            assert q.state == CANCELLED
            assert q.id not in s.decoding and q not in s.prefilling
        if result is None:
            assert not s.prefilling and not s.decoding
            return False
        bg = s.background
        lim = s.limits
        assert result.start == self.now and result.end > result.start
        # slots: the batch of the step, background included, never exceeds max_batch
        assert result.batch <= lim.max_batch
        running_in_step = s.running + len(result.finished)
        assert running_in_step + bg.seqs <= lim.max_batch
        # KV: the blocks of running sequences, the cache and the background fit the capacity
        running = (*s.prefilling, *s.decoding.values())
        user_kv = sum(s.held_of(q) for q in running)
        pinned = s.cache.pinned if s.cache is not None else 0
        cached = s.cache.size if s.cache is not None else 0
        assert s.kv_used_tokens == user_kv + bg.kv_tokens + pinned
        kv_in_step = user_kv + sum(s.held_of(q) for q in result.finished)
        assert user_kv + cached + bg.kv_tokens <= s.kv_capacity
        for q in running:  # whole blocks, holding every token whose KV is written
            assert s.blocks_of(q) % s.block == 0
            assert s.blocks_of(q) >= q.prompt_tokens + max(0, q.tokens_after(s.step_index) - 1)
        # the O(1) context bookkeeping matches the sequences
        ctx = sum(q.prompt_tokens + q.tokens_after(s.step_index) for q in s.decoding.values())
        assert s._decode_ctx == ctx
        # token budget: prompt tokens processed this step fit what decode left over
        progress = sum(
            q.prefilled - before[q.id][1]
            for q in active
            if before[q.id][0] in (WAITING, PREFILL) and q.state not in (WAITING, CANCELLED)
        )
        room = lim.max_batched_tokens - (result.decode_tokens + bg.seqs + bg.prefill_tokens_per_step)
        # newly admitted sequences start from their cached prefix, not from 0
        progress -= sum(
            q.cached_tokens
            for q in active
            if before[q.id][0] == WAITING and q.state not in (WAITING, CANCELLED)
        )
        assert progress <= max(room, 1)
        # FCFS: nobody waiting was submitted before someone admitted (a preempted request
        # waits again, first in line)
        for q in active:
            if before[q.id][0] == WAITING and q.state not in (WAITING, CANCELLED):
                self.admitted_max = max(self.admitted_max, self.order[q.id])
                assert q.admitted_at == self.now or q.preemptions
        fresh = [q for q in s.waiting if not q.preemptions]
        if fresh:
            assert min(self.order[q.id] for q in fresh) > self.admitted_max
        if s.waiting:
            # admission is work-conserving: the head waits only for a slot or for KV, or
            # because the step preempted (vLLM admits nobody then)
            head = s.waiting[0]
            no_slot = running_in_step + bg.seqs >= lim.max_batch
            no_kv = s._need(head) > s.kv_capacity - bg.kv_tokens - kv_in_step - cached
            assert no_slot or no_kv or s.preemptions > preempted_before
        # finishes: exactly once, with all their tokens, never after a cancel
        for q in result.finished:
            self.finished_count[q.id] = self.finished_count.get(q.id, 0) + 1
            assert q.state == FINISHED and q.finished_at == result.end
            assert q.tokens_after(result.index) == q.output_tokens
            assert q.preemptions or result.index - q.first_step + 1 == q.output_tokens
            assert q.id not in self.cancel_requested or before[q.id][0] != CANCELLED
        for q in result.first_tokens:
            assert q.first_token_at == result.end and q.first_step == result.index
        self.now = result.end
        self.active = [q for q in active if q.state not in (FINISHED, CANCELLED)]
        return True

    def drain(self) -> None:
        for _ in range(100_000):
            if not self.step():
                if not self.s.has_work:
                    break
                self.now += 0.001
        assert not self.s.has_work

    def check_outcomes(self) -> None:
        for q in self.accepted:
            n = self.finished_count.get(q.id, 0)
            if q.state == FINISHED:
                assert n == 1
                assert q.first_token_at <= q.finished_at
                assert q.arrival <= q.admitted_at < q.first_token_at
            else:
                assert q.state == CANCELLED and n == 0
                assert q.id in self.cancel_requested


def random_run(seed: int, sched: Scheduler, steps: int = 250, max_prompt: int = 6000) -> Checker:
    rng = random.Random(seed)
    c = Checker(sched, rng)
    for _ in range(steps):
        r = rng.random()
        if r < 0.35:
            for _ in range(rng.randint(1, 4)):
                c.submit(rng.randint(1, max_prompt), rng.randint(1, 300), rng.choice([0, 0, 500]))
        elif r < 0.45:
            c.cancel_random()
        if not c.step():
            c.now += rng.random() * 0.05
    c.drain()
    c.check_outcomes()
    return c


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_invariants_under_random_workloads(seed: int):
    c = random_run(seed, make())
    assert c.accepted


def test_invariants_when_the_kv_cache_runs_out():
    """Every rule holds while requests are preempted (KV blocks run out) and recomputed."""
    runs = [random_run(seed, make(placement=TIGHT), steps=300, max_prompt=8000)
            for seed in range(4)]
    assert sum(c.s.preemptions for c in runs) > 0


@settings(max_examples=10, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(2, 40),
    st.integers(16, 4096),
    st.integers(0, 20),
    st.integers(0, 1),
)
def test_invariants_under_random_limits(seed, max_batch, budget, max_waiting, bg_seqs):
    bg = Background(min(bg_seqs, max_batch - 1), 3000, 8)
    random_run(seed, make(max_batch, budget, max_waiting, bg), steps=150, max_prompt=2000)


def test_kv_memory_bounds_admission():
    s = make(max_batch=64, budget=8192, max_waiting=100, bg=Background())
    big = s.kv_capacity // 3  # three of these fit, a fourth does not
    seqs = [Sequence(i, big - 10, 10, 0.0) for i in range(4)]
    for q in seqs:
        assert s.submit(q)
    s.step(0.0)
    assert [q.state for q in seqs[:3]] != [WAITING] * 3
    assert seqs[3].state == WAITING
    assert s.kv_used_tokens <= s.kv_capacity


def test_a_cancelled_sequence_frees_its_slot_at_the_next_step():
    s = make(max_batch=4, budget=4096, max_waiting=10, bg=Background(1, 100, 0))
    running = [Sequence(i, 100, 1000, 0.0) for i in range(3)]
    late = Sequence(9, 100, 10, 0.0)
    for q in (*running, late):
        assert s.submit(q)
    r = s.step(0.0)
    assert all(q.state == DECODE for q in running)
    assert late.state == WAITING  # 1 background + 3 running = 4 slots
    now = r.end
    for _ in range(3):
        now = s.step(now).end
        assert late.state == WAITING
    s.cancel(running[1])
    assert running[1].state == DECODE  # leaves when the next step is planned, not before
    r = s.step(now)
    assert running[1].state == CANCELLED
    assert late.state in (PREFILL, DECODE) and late.admitted_at == now
    assert r.batch == 4
    # cancelling twice, or after the end, changes nothing
    s.cancel(running[1])
    assert running[1].state == CANCELLED


def test_cancelling_a_waiting_sequence_removes_it_from_the_queue():
    s = make(max_batch=3, budget=4096, max_waiting=2, bg=Background(2, 100, 0))
    a, b, c = (Sequence(i, 50, 5, 0.0) for i in range(3))
    assert s.submit(a) and s.submit(b)
    s.step(0.0)  # a admitted (one free slot), b waits
    assert s.submit(c)
    assert not s.submit(Sequence(7, 50, 5, 0.0))  # queue of 2 is full: refused (overload)
    s.cancel(b)
    assert b.state == CANCELLED and list(s.waiting) == [c]
    assert s.submit(Sequence(8, 50, 5, 0.0))
    assert not s.submit(Sequence(9, 50, 5, 0.0))


def test_fcfs_head_of_line_is_not_overtaken_by_a_smaller_request():
    s = make(max_batch=64, budget=8192, max_waiting=100, bg=Background())
    first = Sequence(1, s.kv_capacity - 100, 50, 0.0)
    huge = Sequence(2, s.kv_capacity // 2, 50, 0.0)
    small = Sequence(3, 10, 5, 0.0)
    for q in (first, huge, small):
        s.submit(q)
    s.step(0.0)
    assert first.state != WAITING
    assert huge.state == WAITING and small.state == WAITING  # small does not jump the queue


def test_prompt_longer_than_budget_is_prefilled_in_chunks():
    s = make(max_batch=8, budget=256, max_waiting=10, bg=Background())
    q = Sequence(1, 1000, 3, 0.0)
    s.submit(q)
    now, steps = 0.0, 0
    while q.state in (WAITING, PREFILL):
        now = s.step(now).end
        steps += 1
    assert steps == 4  # ceil(1000 / 256)
    assert q.first_step == 3


def test_background_must_leave_room():
    with pytest.raises(ValueError, match="background.seqs"):
        make(max_batch=4, bg=Background(4, 10, 0))
    with pytest.raises(ValueError, match="capacity"):
        make(bg=Background(2, 10**7, 0))
