"""Continuous (iteration-level) batching for one replica, as a state machine with no clock.

The scheduler is told "now" and answers with the step it runs from then and when that step
ends; a driver (``backends/drivers/``) owns the clock. The model is vLLM's / Orca's:

- a FCFS waiting queue, bounded: a request that finds it full is refused (overload);
- a running batch bounded by ``max_batch`` slots and by KV-cache memory;
- every step, each decoding sequence produces one token, and prompt tokens of newly admitted
  sequences fill the rest of a per-step token budget (chunked prefill). The step that finishes a
  prompt also produces that sequence's first token;
- a finished or cancelled sequence leaves the batch, freeing its slot and KV, before the next
  step is planned.

Other tenants ("background") occupy slots, KV memory and part of the token budget and make every
step slower, so that one user alone sees production speeds rather than an empty GPU.

KV memory: a sequence reserves the KV it will reach (prompt + output) when admitted. The mock
knows each reply's length up front, so this equals on-demand paging without preemption.

Bookkeeping is O(1) per step in the number of running sequences: a sequence's token count is
derived from the global step index (``step_index - first_step``), its finish step sits in a
heap, and the batch's total context grows by the number of decoders each step. That is what lets
``fastmode simulate`` run an hour of traffic in seconds.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .perf import Placement, prefill_attention_context


@dataclass(frozen=True)
class Limits:
    """Scheduler limits of one replica (vLLM names in brackets)."""

    max_batch: int = 256  # running sequences at once [max_num_seqs]
    max_batched_tokens: int = 8192  # tokens per step, decode + prefill [max_num_batched_tokens]
    max_waiting: int = 1024  # waiting-queue bound; beyond it a request is refused (overload)


@dataclass(frozen=True)
class Background:
    """Other tenants' steady load on a replica: traffic we do not see but share the GPU with."""

    seqs: int = 0  # sequences of other tenants decoding in every step
    context_tokens: int = 0  # their mean context length
    prefill_tokens_per_step: int = 0  # their prompt tokens riding along in every step

    @property
    def kv_tokens(self) -> int:
        return self.seqs * self.context_tokens

    @property
    def prefill_context(self) -> float:
        """Context their prompt tokens attend to: each chunk lands mid-way into its prompt."""
        return prefill_attention_context(self.prefill_tokens_per_step, self.context_tokens // 2)


WAITING, PREFILL, DECODE, FINISHED, CANCELLED = (
    "waiting",
    "prefill",
    "decode",
    "finished",
    "cancelled",
)


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine. ``tag`` is the driver's (e.g. where to send tokens)."""

    id: int
    prompt_tokens: int
    output_tokens: int
    arrival: float
    cached_tokens: int = 0  # prefix already in the KV cache (a continuation): no prefill
    tag: Any = None
    state: str = WAITING
    prefilled: int = 0
    first_step: int = -1  # index of the step that produced token 0
    admitted_at: float = -1.0
    first_token_at: float = -1.0
    finished_at: float = -1.0

    @property
    def kv_reserved(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def tokens_after(self, step_index: int) -> int:
        """Tokens produced once step ``step_index`` has run."""
        if self.first_step < 0 or step_index < self.first_step:
            return 0
        return min(self.output_tokens, step_index - self.first_step + 1)


@dataclass(slots=True)
class StepResult:
    """What one step did. Sequences in ``decoding`` (scheduler attribute) all got one token."""

    index: int
    start: float
    end: float
    decode_tokens: int  # user tokens produced by decoding sequences (one each)
    first_tokens: list[Sequence] = field(default_factory=list)  # prefill finished: token 0
    finished: list[Sequence] = field(default_factory=list)
    batch: int = 0  # sequences in the step, background included


class Scheduler:
    """One replica's continuous-batching state machine."""

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
        self._decode_ctx = 0  # sum of context of user decoding sequences
        self._kv_used = 0  # KV reserved by admitted user sequences
        self._cancelled: set[int] = set()
        self.step_index = -1  # index of the last step run
        self.busy_until = 0.0
        self._lines: dict[int, tuple[float, ...]] = {}  # decode_line per user batch size

    # -- requests -------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def kv_used_tokens(self) -> int:
        return self._kv_used + self.background.kv_tokens

    def fits_ever(self, seq: Sequence) -> bool:
        """Could this sequence be admitted on an otherwise idle replica?"""
        return seq.kv_reserved <= self.kv_capacity - self.background.kv_tokens

    def submit(self, seq: Sequence) -> bool:
        """Queue a sequence. False when the waiting queue is full: the replica is overloaded.

        Sequences that a free slot will take at the next step do not count against
        ``max_waiting``: it bounds those that must wait for a slot to free up.
        """
        free_slots = self.limits.max_batch - self.background.seqs - self.running
        if len(self.waiting) >= self.limits.max_waiting + max(0, free_slots):
            return False
        seq.state = WAITING
        self.waiting.append(seq)
        return True

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
            if seq is not None:
                self._decode_ctx -= seq.prompt_tokens + seq.tokens_after(self.step_index)
            else:
                for i, s in enumerate(self.prefilling):
                    if s.id == sid:
                        seq = self.prefilling.pop(i)
                        break
            if seq is not None:
                self._kv_used -= seq.kv_reserved
                seq.state = CANCELLED
                dropped.append(seq)
        self._cancelled.clear()
        return dropped

    def _admit(self, now: float) -> None:
        bg = self.background
        slots = self.limits.max_batch - bg.seqs - self.running
        kv_free = self.kv_capacity - bg.kv_tokens - self._kv_used
        while self.waiting and slots > 0:
            seq = self.waiting[0]
            if seq.kv_reserved > kv_free:
                break  # strict FCFS: nobody overtakes the head of the queue
            self.waiting.popleft()
            seq.state = PREFILL
            seq.admitted_at = now
            seq.prefilled = seq.cached_tokens
            self.prefilling.append(seq)
            self._kv_used += seq.kv_reserved
            kv_free -= seq.kv_reserved
            slots -= 1

    def step(self, now: float) -> StepResult | None:
        """Plan and run one step starting at ``now``; None when there is nothing to do."""
        self._drop_cancelled()
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
            # Always let the oldest prompt make progress, even when decoders eat the budget.
            room = budget if budget > 0 else (1 if not chunks else 0)
            if room <= 0:
                break
            need = max(seq.prompt_tokens - seq.prefilled, 1)
            c = min(need, room)
            chunks.append((seq, c))
            prefill_ctx += prefill_attention_context(c, seq.prefilled)
            prefill_tokens += c
            budget -= c
        dt = self.placement.step_seconds(
            n_dec + bg.seqs,
            self._decode_ctx + bg.kv_tokens,
            prefill_tokens,
            prefill_ctx,
        )
        end = now + dt
        result = StepResult(index, now, end, n_dec, batch=n_dec + bg.seqs + len(self.prefilling))
        # Decoders each produced a token; their context grows by one.
        self._decode_ctx += n_dec
        for seq, c in chunks:
            seq.prefilled += c
            if seq.prefilled >= seq.prompt_tokens:
                self.prefilling.remove(seq)
                seq.state = DECODE
                seq.first_step = index
                seq.first_token_at = end
                result.first_tokens.append(seq)
                self.decoding[seq.id] = seq
                self._decode_ctx += seq.prompt_tokens + 1
                heapq.heappush(self._finish_heap, (index + seq.output_tokens - 1, seq.id))
        self.step_index = index
        self.busy_until = end
        self._retire(index, end, result.finished)
        return result

    def _retire(self, index: int, end: float, out: list[Sequence]) -> None:
        heap = self._finish_heap
        while heap and heap[0][0] <= index:
            _, sid = heapq.heappop(heap)
            seq = self.decoding.pop(sid, None)
            if seq is None:  # cancelled earlier
                continue
            self._cancelled.discard(sid)
            self._decode_ctx -= seq.prompt_tokens + seq.output_tokens
            self._kv_used -= seq.kv_reserved
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
        if self.waiting and self.limits.max_batch - self.background.seqs - self.running > 0:
            return False
        return True

    def finish_lower_bound(self, now: float) -> float:
        """A lower bound of when the next step that finishes a sequence ends, if the next step
        starts at ``now`` and nothing is admitted before then (closed-loop virtual runs).

        In a steady state the batch is fixed until its first finish and each step is at least
        as long as the next one (contexts only grow); otherwise the next step may finish one.
        """
        if not self.steady():
            return now
        bg = self.background
        dt = self.placement.step_seconds(
            len(self.decoding) + bg.seqs,
            self._decode_ctx + bg.kv_tokens,
            bg.prefill_tokens_per_step,
            bg.prefill_context,
        )
        steps = self._finish_heap[0][0] - self.step_index
        return now + steps * dt * (1.0 - 1e-9)

    def run_steady(self, now: float, until: float) -> tuple[StepResult, float, float]:
        """Run decode-only steps from ``now`` while no event can change the batch.

        Stops after the step in which the first sequence finishes, or after the first step that
        ends at or beyond ``until``. Returns one result covering all the steps (``decode_tokens``
        summed, ``end`` of the last) and the first and last step durations (step times only grow
        within a stretch, as contexts do). The timeline is the one ``step`` would produce.
        """
        bg = self.background
        n = len(self.decoding)
        last = self._finish_heap[0][0]  # first finish step
        line = self._lines.get(n)  # depends on the batch only: memoised per batch size
        if line is None:
            line = self._lines[n] = self.placement.decode_line(
                n + bg.seqs,
                bg.prefill_tokens_per_step,
                bg.prefill_context,
            )
        w, c0, c1, k1, floor, fixed = line
        start = now
        index = self.step_index
        steps_left = last - index
        ctx = self._decode_ctx + bg.kv_tokens
        first_dt = dt = 0.0
        steps = 0
        while steps < steps_left:
            x = c0 + c1 * ctx
            core = (w if w > x else x) + k1 * ctx
            dt = (core if core > floor else floor) + fixed
            if steps == 0:
                first_dt = dt
            now += dt
            ctx += n
            steps += 1
            if now >= until:
                break
        index += steps
        self._decode_ctx = ctx - bg.kv_tokens
        self.step_index = index
        self.busy_until = now
        result = StepResult(index, start, now, n * steps, batch=n + bg.seqs)
        self._retire(index, now, result.finished)
        return result, first_dt, dt
