"""KV memory in blocks, allocated as sequences grow, and preemption when it runs out, as vLLM
does it (vllm/v1/core/sched/scheduler.py ``schedule``, vllm/v1/core/kv_cache_manager.py
``allocate_slots``). A mixin of ``backends.scheduler.Scheduler``.

- Admission takes the blocks of what a sequence prefills (its prompt, less the prefix it finds
  cached); its reply's length is not reserved.
- Each decode step writes one token of KV. A sequence whose blocks are full before a step takes
  one more block (``block_size`` tokens), evicting unreferenced cached prefixes first when no
  block is free (those that waiting requests found and pinned included: vLLM's waiting
  requests hold no blocks).
- When none can be had, the scheduler preempts the **newest** running request (the last one
  admitted: vLLM's ``self.running.pop()``) in recompute mode: its blocks are freed, it goes
  back to the front of the waiting queue, and when admitted again it prefills its prompt and
  the tokens it had made (a prefix-cache hit shortens that). It repeats until the block is
  had, or until the one that needs it is itself the newest and has been preempted. A step
  that preempted admits nobody (vLLM schedules waiting requests only when no running request
  was preempted).

The bookkeeping stays O(1) per step in the batch: a sequence's next block is due at a known
step (its context grows by one a step), kept in a heap, so a step looks only at the sequences
whose block is due, about one in ``block_size`` per step. A steady stretch of the virtual clock
ends before the first step whose blocks would not fit (``_room``), so that step is planned one
at a time and preempts as above.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING

from .sequence import DECODE, WAITING, Sequence

if TYPE_CHECKING:
    from .background import Background
    from .prefix_cache import PrefixCache


def round_up(tokens: int, block: int) -> int:
    """Tokens of KV the blocks holding ``tokens`` tokens take."""
    return -(-tokens // block) * block


class KvPaging:
    block: int
    kv_capacity: int
    background: Background
    cache: PrefixCache | None
    waiting: deque[Sequence]
    prefilling: list[Sequence]
    decoding: dict[int, Sequence]
    step_index: int
    busy_until: float
    _kv_used: int
    _decode_ctx: int
    _block_heap: list[tuple[int, int]]  # (step that needs the sequence's next block, id)
    _admitted: dict[int, Sequence]  # running sequences in admission order (vLLM's running)
    preemptions: int  # requests preempted since start (vllm:num_preemptions_total)

    def _unpin(self, seq: Sequence, now: float) -> None:
        raise NotImplementedError

    # -- blocks -----------------------------------------------------------------------------

    def _kv_free(self) -> int:
        """KV not held by anyone (unreferenced cached prefixes count as held: evict first)."""
        used = self.background.kv_tokens + self._kv_used
        if self.cache is not None:
            used += self.cache.size
        return self.kv_capacity - used

    def _take_block(self) -> bool:
        """Make room for one more block, evicting unreferenced cached prefixes if need be, then
        those only waiting requests pin (in vLLM a waiting request holds no block: its hits
        are looked up when it is scheduled)."""
        free = self._kv_free()
        cache, b = self.cache, self.block
        if free < b and cache is not None:
            free += cache.evict(b - free)
            if free < b and cache.pinned:
                cache.unpin_waiting(self.waiting, self.busy_until)
                free += cache.evict(b - free)
        return free >= b

    def _give_block(self, seq: Sequence, step: int) -> None:
        """``seq`` takes the block it needs before ``step``; its next one is due a block later."""
        b = self.block
        seq.kv_blocks += b
        seq.kv_held += b
        self._kv_used += b
        seq.next_block_step = -1
        nxt = step + b
        if nxt <= seq.finish_step:
            seq.next_block_step = nxt
            heapq.heappush(self._block_heap, (nxt, seq.id))

    def _blocks_from(self, seq: Sequence, step: int) -> None:
        """``seq`` made token ``recompute`` (its first after a prefill) in ``step``: when its
        blocks are next full. Before step ``i`` its context is ``prefill_target + i - step``."""
        nxt = step + seq.kv_blocks - seq.prefill_target + 1
        if nxt <= seq.finish_step:
            seq.next_block_step = nxt
            heapq.heappush(self._block_heap, (nxt, seq.id))

    def _due(self, index: int) -> list[Sequence]:
        """Decoding sequences whose next block is due before step ``index``, oldest first."""
        heap, decoding, due = self._block_heap, self.decoding, []
        while heap and heap[0][0] <= index:
            step, sid = heapq.heappop(heap)
            seq = decoding.get(sid)
            if seq is not None and seq.next_block_step == step:
                seq.next_block_step = -1  # taken off the heap (a stale twin is not)
                due.append(seq)
        due.sort(key=lambda s: s.rank)
        return due

    def _grow(self, index: int) -> bool:
        """Before step ``index``: give every decoder whose blocks are full one more, preempting
        the newest running requests while none is free. True if any was preempted."""
        heap = self._block_heap
        if not heap or heap[0][0] > index:
            return False
        preempted = False
        for seq in self._due(index):
            if seq.state != DECODE:
                continue  # preempted for an older one meanwhile
            while not self._take_block():
                victim = self._admitted[next(reversed(self._admitted))]
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                self._give_block(seq, index)
        return preempted

    def _preempt(self, seq: Sequence) -> None:
        """Recompute-mode preemption: free all of ``seq``'s KV and queue it first."""
        del self._admitted[seq.id]
        if seq.state == DECODE:
            del self.decoding[seq.id]
            made = seq.tokens_after(self.step_index)
            self._decode_ctx -= seq.prompt_tokens + made
            seq.pause(self.step_index)
            seq.recompute = made
        else:  # still prefilling: what it prefilled is lost too
            self.prefilling.remove(seq)
        self._kv_used -= seq.kv_held
        seq.kv_held = seq.kv_blocks = 0
        seq.next_block_step = seq.finish_step = -1
        self._unpin(seq, self.busy_until)
        seq.cache_hit = 0
        seq.relook = self.cache is not None and seq.prefix is not None
        seq.prefilled = 0
        seq.state = WAITING
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _relook(self, seq: Sequence, now: float) -> None:
        """A preempted sequence comes up for admission: the prefix it finds cached now."""
        seq.relook = False
        cache = self.cache
        if cache is None or seq.prefix is None:
            return
        entry = cache.lookup(seq.prefix, seq.prompt_tokens, now)
        if entry is not None:
            cache.acquire(entry, now)
            seq.cache_entry = entry
            seq.cache_hit = entry.tokens

    # -- the virtual clock's stretches ------------------------------------------------------

    def _room(self, limit: int) -> int:
        """Steps from the next on (up to ``limit``) whose blocks all fit without preempting:
        a steady stretch runs no further."""
        heap = self._block_heap
        if not heap or heap[0][0] > self.step_index + limit:
            return limit
        avail = self._kv_free()
        if self.cache is not None:
            avail += self.cache.evictable
        avail //= self.block
        decoding, b, base = self.decoding, self.block, self.step_index
        starts = [s for s, sid in set(heap)
                  if (q := decoding.get(sid)) is not None and q.next_block_step == s]

        def blocks_by(r: int) -> int:  # blocks the next ``r`` steps take
            t = base + r
            return sum((t - s) // b + 1 for s in starts if s <= t)

        if blocks_by(limit) <= avail:
            return limit
        lo, hi = 0, limit  # blocks_by(lo) fits, blocks_by(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if blocks_by(mid) <= avail:
                lo = mid
            else:
                hi = mid
        return lo

    def _grow_steady(self) -> None:
        """A steady stretch ran up to ``step_index``: the blocks its steps took (they fit:
        ``_room``)."""
        heap = self._block_heap
        index = self.step_index
        while heap and heap[0][0] <= index:
            step, sid = heapq.heappop(heap)
            seq = self.decoding.get(sid)
            if seq is None or seq.next_block_step != step:
                continue
            seq.next_block_step = -1
            taken = self._take_block()
            assert taken, "a steady stretch ran past its KV"
            self._give_block(seq, step)


__all__ = ["KvPaging", "round_up"]
