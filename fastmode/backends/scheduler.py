"""Continuous (iteration-level) batching for one replica, as a state machine with no clock.

The scheduler is told "now" and answers with the step it runs from then and when that step
ends; a driver (``fastmode/backends/drivers/``) owns the clock. The model is vLLM's / Orca's:

- a FCFS waiting queue, bounded: a request that finds it full is refused (overload);
- a running batch bounded by ``max_batch`` slots and by KV-cache memory;
- every step, each decoding sequence produces one token, and prompt tokens of newly admitted
  sequences fill the rest of a per-step token budget (chunked prefill). The step that finishes a
  prompt also produces that sequence's first token;
- a finished or cancelled sequence leaves the batch, freeing its slot and KV, before the next
  step is planned.

Other tenants ("background") occupy slots, KV memory and part of the token budget and make every
step slower, so that one user alone sees production speeds rather than an empty GPU. With a
fleet, their load moves (``backends.tenants`` calls ``set_background`` at its ticks, and their
waiting requests count against ``max_waiting``). A shared pool orders its waiting queue by the
sequences' ``priority`` (higher first, FCFS within one): "priority processing".

KV memory is paged as vLLM pages it (``backends.kv_paging``): a sequence takes the blocks of
its prompt when admitted and one more block whenever its context fills the last; when no block
is left, the newest running request is preempted (its KV freed, recomputed when it is admitted
again). ``vllm:num_preemptions_total`` counts them (``preemptions``).

Prefix caching (``backends.prefix_cache``): a sequence with a ``PrefixKey`` finds its cached
prefix when queued and neither prefills nor reserves it; its own prefix is stored once computed.
Unpinned cache is the memory left over, evicted (LRU) when admission needs the room.

Bookkeeping is O(1) per step in the number of running sequences: a sequence's token count is
derived from the global step index (``step_index - first_step``, per segment of steps once it
was preempted: ``backends.sequence``), its finish step and next block sit in heaps, and the batch's total context grows by the number of decoders each step. That is what lets
``fastmode simulate`` run an hour of traffic in seconds.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from fastmode.backends.background import Background
from fastmode.backends.kv_paging import KvPaging, round_up
from fastmode.backends.lora import LoraSlots
from fastmode.backends.perf import Placement, prefill_attention_context
from fastmode.backends.prefix_cache import PrefixCache, PrefixKey
from fastmode.backends.sequence import CANCELLED, DECODE, FINISHED, PREFILL, WAITING, Sequence
from fastmode.backends.step_memo import StepMemo
from fastmode.backends.stretch import stretch


@dataclass(frozen=True)
class Limits:
    """Scheduler limits of one replica (vLLM names in brackets)."""

    max_batch: int = 256  # running sequences at once [max_num_seqs]
    max_batched_tokens: int = 8192  # tokens per step, decode + prefill [max_num_batched_tokens]
    max_waiting: int = 1024  # waiting-queue bound; beyond it a request is refused (overload)
    prefix_caching: bool = True  # keep computed prompt prefixes [enable_prefix_caching]
    block_size: int = 16  # tokens of KV per block [block_size]


@dataclass(slots=True)
class StepResult:
    """What one step did. Sequences in ``decoding`` (scheduler attribute) all got one token."""

    index: int
    start: float
    end: float
    decode_tokens: int  # user tokens produced by decoding sequences (one each)
    first_tokens: list[Sequence] = field(default_factory=list)  # prefill finished: token 0
    resumed: list[Sequence] = field(default_factory=list)  # recompute done: their next token
    finished: list[Sequence] = field(default_factory=list)
    batch: int = 0  # sequences in the step, background included
    slip: float = 0.0  # seconds a real-time host served it late: ``end`` includes them


class Scheduler(StepMemo, KvPaging):
    """One replica's continuous-batching state machine."""

    paging = True  # KV in blocks as sequences grow, preemption (False: reserved at admission)

    def __init__(self, placement: Placement, limits: Limits, background: Background) -> None:
        self.placement = placement
        self.limits = limits
        self.background = background
        if background.seqs >= limits.max_batch:
            raise ValueError("background.seqs: must be below max_batch")
        self.kv_capacity = placement.kv_capacity_tokens
        if background.kv_tokens >= self.kv_capacity:
            raise ValueError(
                f"background: {background.kv_tokens} KV tokens exceed the replica's "
                f"capacity of {self.kv_capacity}"
            )
        self.waiting: deque[Sequence] = deque()
        self.prefilling: list[Sequence] = []
        self.decoding: dict[int, Sequence] = {}
        self._finish_heap: list[tuple[int, int]] = []  # (finish step index, seq id)
        self.block = max(1, limits.block_size)
        self._residues: list[dict[int, Sequence]] = [{} for _ in range(self.block)]
        self._admitted: dict[int, Sequence] = {}
        self._ranks = 0
        self.preemptions = 0
        self._decode_ctx = 0  # sum of context of user decoding sequences
        self._kv_used = 0  # KV reserved by admitted user sequences
        self._cancelled: set[int] = set()
        self.step_index = -1  # index of the last step run
        self.busy_until = 0.0
        self._lines: dict[int, tuple[float, ...]] = {}  # decode_line per batch (bg included)
        self.queued_elsewhere = 0  # the other tenants' waiting requests (backends.tenants)
        self._step_lines: dict[tuple[int, int, float], tuple[float, ...]] = {}
        self._stepwise = getattr(placement, "stepwise", False)  # no closed-form line
        self.cache: PrefixCache | None = PrefixCache() if limits.prefix_caching else None
        self.lora: LoraSlots | None = None  # adapter slots (backends.lora), set by the spec

    # -- requests -------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Admitted sequences still to be served: a cancelled one leaves the batch when the
        next step is planned, but from the cancel on it is no load to route by or to report."""
        return len(self.prefilling) + len(self.decoding) - len(self._cancelled)

    @property
    def kv_used_tokens(self) -> int:
        """KV in use: admitted sequences', the background's and the cache they pin (unpinned
        cache counts as free, as in vLLM's ``kv_cache_usage_perc``)."""
        pinned = self.cache.pinned if self.cache is not None else 0
        return self._kv_used + self.background.kv_tokens + pinned

    def cached_prefix(self, prefix: PrefixKey, prompt_tokens: int, now: float) -> int:
        """Tokens of a prompt this replica holds in its prefix cache (routing asks; no query
        is counted)."""
        if self.cache is None:
            return 0
        return self.cache.peek(prefix, prompt_tokens, now)

    def fits_ever(self, seq: Sequence) -> bool:
        """Could this sequence run to its end on an otherwise idle replica (its whole reply's
        KV, in whole blocks when paged)?"""
        need = round_up(seq.kv_reserved, self.block) if self.paging else seq.kv_reserved
        return need <= self.kv_capacity - self.background.kv_tokens

    def submit(self, seq: Sequence) -> bool:
        """Queue a sequence. False when the waiting queue is full: the replica is overloaded.

        Sequences that a free slot will take at the next step do not count against
        ``max_waiting``: it bounds those that must wait for a slot to free up.
        """
        free_slots = self.limits.max_batch - self.background.seqs - self.running
        if len(self.waiting) + self.queued_elsewhere >= self.limits.max_waiting + max(
            0, free_slots
        ):
            return False
        seq.state = WAITING
        if self.cache is not None and seq.prefix is not None:
            self.cache.attach(seq)  # found and pinned now: what admission bills is what we skip
        waiting = self.waiting
        if seq.priority and waiting and waiting[-1].priority < seq.priority:
            # priority admission: ahead of every lower priority, behind its own (FCFS within)
            i = next(k for k, s in enumerate(waiting) if s.priority < seq.priority)
            waiting.insert(i, seq)
        else:
            waiting.append(seq)
        return True

    def set_background(self, background: Background) -> None:
        """The other tenants' load changed (``backends.tenants``): later steps see it."""
        old = self.background
        if (old.prefill_tokens_per_step, old.context_tokens) != (
            background.prefill_tokens_per_step, background.context_tokens
        ):
            self._lines.clear()  # the memoised step lines depend on the prefill riding along
        self.background = background

    def _unpin(self, seq: Sequence, now: float) -> None:
        self._admitted.pop(seq.id, None)
        if self.cache is not None:
            self.cache.detach(seq, now)
        if self.lora is not None:
            self.lora.leave(seq)  # every way out of the engine passes here

    def cancel(self, seq: Sequence) -> None:
        """Cancel a sequence; it leaves the batch (and frees its KV) when the next step is planned."""
        if seq.state in (FINISHED, CANCELLED):
            return
        if seq.state == WAITING:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
            seq.state = CANCELLED
            self._unpin(seq, self.busy_until)
            return
        self._cancelled.add(seq.id)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.decoding)

    # -- stepping -------------------------------------------------------------------------

    def _drop_cancelled(self) -> list[Sequence]:
        dropped: list[Sequence] = []
        if not self._cancelled:
            return dropped
        for sid in self._cancelled:
            seq = self.decoding.pop(sid, None)
            held = 0
            if seq is not None:
                self._decode_ctx -= seq.prompt_tokens + seq.tokens_after(self.step_index)
                held = self._leave(seq, self.step_index) if self.paging else seq.kv_held
            else:
                for i, s in enumerate(self.prefilling):
                    if s.id == sid:
                        seq = self.prefilling.pop(i)
                        held = seq.kv_held
                        break
            if seq is not None:
                self._kv_used -= held
                self._unpin(seq, self.busy_until)
                seq.state = CANCELLED
                dropped.append(seq)
        self._cancelled.clear()
        return dropped

    def _admit(self, now: float) -> None:
        bg = self.background
        slots = self.limits.max_batch - bg.seqs - self.running
        cache = self.cache
        kv_free = self.kv_capacity - bg.kv_tokens - self._kv_used
        if cache is not None:
            kv_free -= cache.size
        gate, passed = self.lora, 0  # passed over: their adapter cannot join (backends.lora)
        while len(self.waiting) > passed and slots > 0:
            seq = self.waiting[passed]
            if gate is not None and not gate.admits(seq):
                passed += 1
                continue
            if seq.relook:
                self._relook(seq, now)
            need = self._need(seq)
            if need > kv_free and cache is not None:
                kv_free += cache.evict(need - kv_free)  # memory pressure: LRU prefixes go
                if need > kv_free and not self.running:  # waiters' pins would block forever
                    cache.unpin_waiting(self.waiting, now)
                    need = self._need(seq)
                    kv_free += cache.evict(need - kv_free)
            if need > kv_free:
                break  # strict FCFS: nobody overtakes the head of the queue
            del self.waiting[passed]  # the head (O(1)) unless LoRA requests were passed over
            if gate is not None:
                gate.join(seq)
            seq.state = PREFILL
            if seq.admitted_at < 0:  # (first admission: a preempted one keeps its queue time)
                seq.admitted_at = now
            seq.kv_ready_at = now + seq.remote_kv_s  # P/D: its KV crosses from now on
            seq.prefilled = seq.prefill_start
            self.prefilling.append(seq)
            self._admitted[seq.id] = seq
            seq.rank = self._ranks = self._ranks + 1
            seq.kv_held = need
            seq.kv_blocks = need + seq.cache_hit
            self._kv_used += need
            kv_free -= need
            slots -= 1

    def _need(self, seq: Sequence) -> int:
        """KV a sequence takes when admitted, beside the cached prefix it reads: the blocks of
        what it prefills (paging), or its whole reply's."""
        if self.paging:
            return round_up(seq.prefill_target, self.block) - seq.cache_hit
        return seq.kv_reserved - seq.cache_hit

    def step(self, now: float) -> StepResult | None:
        """Plan and run one step starting at ``now``; None when there is nothing to do."""
        self._drop_cancelled()
        preempted = self.paging and self._grow(self.step_index + 1)
        if not preempted or not (self.prefilling or self.decoding):
            # as vLLM: a step that preempted admits nobody, unless it preempted every running
            # request (vLLM's next step, an empty one, would admit them at once)
            self._admit(now)
        if not self.prefilling and not self.decoding:
            return None
        bg = self.background
        index = self.step_index + 1
        n_dec = len(self.decoding)
        budget = self.limits.max_batched_tokens - n_dec - bg.seqs - bg.prefill_tokens_per_step
        prefill_tokens = bg.prefill_tokens_per_step
        prefill_ctx = bg.prefill_context
        chunks: list[tuple[Sequence, int]] = []
        for seq in self.prefilling:
            if seq.kv_ready_at > now:  # its KV is still on its way (P/D): not computable yet
                continue
            # Always let the oldest prompt make progress, even when decoders eat the budget.
            room = budget if budget > 0 else (1 if not chunks else 0)
            if room <= 0:
                break
            need = max(seq.prefill_target - seq.prefilled, 1)
            c = min(need, room)
            chunks.append((seq, c))
            prefill_ctx += prefill_attention_context(c, seq.prefilled)
            prefill_tokens += c
            budget -= c
        if not chunks and not n_dec:  # only KV in flight (P/D): idle until the first is in
            self.step_index = index
            self.busy_until = until = min(s.kv_ready_at for s in self.prefilling)
            return StepResult(index, now, until, 0, batch=bg.seqs)
        dt = self.step_seconds(
            n_dec + bg.seqs, self._decode_ctx + bg.kv_tokens, prefill_tokens, prefill_ctx
        )
        if self.lora is not None and self.lora.active:
            dt += self.lora.step_seconds(chunks, self.prefilling)
        end = now + dt
        result = StepResult(index, now, end, n_dec, batch=n_dec + bg.seqs + len(self.prefilling))
        # Decoders each produced a token; their context grows by one.
        self._decode_ctx += n_dec
        for seq, c in chunks:
            seq.prefilled += c
            if seq.prefilled >= seq.prefill_target:
                self.prefilling.remove(seq)
                self._first_token(seq, index, end, result)
        self.step_index = index
        self.busy_until = end
        self._retire(index, end, result.finished)
        return result

    def _first_token(self, seq: Sequence, index: int, end: float, result: StepResult) -> None:
        """``seq``'s prompt is in: its first token comes at ``end`` (step ``index``) and it
        decodes from the next step until its last token's step."""
        if self.cache is not None and seq.prefix is not None:
            self._kv_used -= self.cache.store(seq, end)  # its prompt's KV is shared now
        seq.state = DECODE
        if seq.first_step < 0:
            seq.first_step = index
            seq.first_token_at = end
            result.first_tokens.append(seq)
        else:  # its recompute after a preemption: token ``recompute`` comes now
            seq.resume(index)
            result.resumed.append(seq)
        self.decoding[seq.id] = seq
        self._decode_ctx += seq.prefill_target + 1
        seq.finish_step = index + seq.output_tokens - seq.recompute - 1
        heapq.heappush(self._finish_heap, (seq.finish_step, seq.id))
        if self.paging:
            self._join(seq, index)

    def _retire(self, index: int, end: float, out: list[Sequence]) -> None:
        heap = self._finish_heap
        while heap and heap[0][0] <= index:
            fstep, sid = heapq.heappop(heap)
            seq = self.decoding.get(sid)
            if seq is None or seq.finish_step != fstep:  # cancelled or preempted earlier
                continue
            del self.decoding[sid]
            self._cancelled.discard(sid)
            self._decode_ctx -= seq.prompt_tokens + seq.output_tokens
            self._kv_used -= self._leave(seq, index) if self.paging else seq.kv_held
            self._unpin(seq, end)
            seq.state = FINISHED
            seq.finished_at = end
            out.append(seq)

    # -- fast path for the virtual clock --------------------------------------------------

    def steady(self) -> bool:
        """True when the next steps are pure decode steps with a fixed batch.

        Nothing waits that could be admitted and no prompt is being prefilled, so until the next
        finish (or an outside event) every step has the same sequences and only their context
        grows.
        """
        if self.prefilling or self._cancelled or not self.decoding:
            return False
        if self._stepwise or (self.lora is not None and self.lora.active):
            return False  # no closed form (speculative decoding; adapters' terms)
        if self.waiting and self.limits.max_batch - self.background.seqs - self.running > 0:
            return False
        return not self.paging or self._room(1) > 0  # its next block fits

    def run_steady(self, now: float, until: float) -> tuple[StepResult, float, float]:
        """Run decode-only steps from ``now`` while no event can change the batch.

        Stops after the step in which the first sequence finishes, or after the first step that
        ends at or beyond ``until``. Returns one result covering all the steps (``decode_tokens``
        summed, ``end`` of the last) and the first and last step durations (step times only grow
        within a stretch, as contexts do). The timeline is the one ``step`` would produce.
        """
        steps, span, first_dt, dt = self.plan_steady(now, until)
        return self.commit_steady(now, steps, span), first_dt, dt

    def plan_steady(self, now: float, until: float) -> tuple[int, float, float, float]:
        """The stretch ``run_steady`` would run, without running it: (steps, their total
        time, first and last step durations). Pure: plan again with another ``until`` to cut
        it shorter, as long as nothing changed the replica in between."""
        bg = self.background
        n = len(self.decoding)
        line = self._line(n + bg.seqs)  # depends on the batch only: memoised per batch size
        ctx = self._decode_ctx + bg.kv_tokens
        steps = self._finish_heap[0][0] - self.step_index
        if self.paging:
            steps = self._room(steps)  # up to the last step whose blocks fit
        return stretch(line, ctx, n, steps, until - now)

    def commit_steady(self, now: float, steps: int, span: float) -> StepResult:
        """Run ``steps`` planned steady steps from ``now`` (``plan_steady``), lasting ``span``."""
        n = len(self.decoding)
        self._decode_ctx += n * steps
        if self.paging:
            self._grow_steady(self.step_index + 1, steps)
        self.step_index += steps
        end = now + span
        self.busy_until = end
        result = StepResult(self.step_index, now, end, n * steps, batch=n + self.background.seqs)
        self._retire(self.step_index, end, result.finished)
        return result


__all__ = ["CANCELLED", "DECODE", "FINISHED", "PREFILL", "WAITING", "Limits", "Scheduler",
           "Sequence", "StepResult"]
