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

The bookkeeping stays O(1) per step in the batch, and a steady stretch of the virtual clock
O(``block_size``) however long: a decoder that made token ``recompute`` (its first after a
prefill of ``prefill_target`` tokens) in step ``s`` needs capacity for ``prefill_target + t - s``
tokens before step ``t``, so it takes a block before exactly the steps ``t`` with ``t = 1 -
prefill_target + s`` modulo ``block_size``. The decoders are counted by that residue: a step
takes as many blocks as its residue class holds, and a stretch of steps the sum over the
classes it runs through; one decoder's blocks are derived from its context when it leaves
(``_held``). A steady stretch ends before the first step whose blocks would not fit
(``_room``), so that step is planned one at a time and preempts as above.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from fastmode.backends.sequence import DECODE, WAITING, Sequence

if TYPE_CHECKING:
    from fastmode.backends.background import Background
    from fastmode.backends.prefix_cache import PrefixCache


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
    _residues: list[dict[int, Sequence]]  # decoders by the residue of the steps they grow at
    _admitted: dict[int, Sequence]  # running sequences in admission order (vLLM's running)
    preemptions: int  # requests preempted since start (vllm:num_preemptions_total)

    def _unpin(self, seq: Sequence, now: float) -> None:
        raise NotImplementedError

    # -- one sequence's blocks ---------------------------------------------------------------

    def _blocks(self, seq: Sequence, through: int) -> int:
        """Tokens of KV ``seq``'s blocks hold once the blocks of step ``through`` are taken
        (the shared cache it reads included; a finished one's, as it left)."""
        start = seq.grow_from
        if start < 0 or through <= start:
            return seq.kv_blocks
        last = min(through, seq.finish_step)
        return round_up(seq.prefill_target + last - start, self.block)

    def _held(self, seq: Sequence, through: int) -> int:
        """KV ``seq`` holds itself once the blocks of step ``through`` are taken."""
        return seq.kv_held + self._blocks(seq, through) - seq.kv_blocks

    def blocks_of(self, seq: Sequence) -> int:
        """Tokens of KV a running sequence's blocks hold now (shared cache included)."""
        return self._blocks(seq, self.step_index)

    def held_of(self, seq: Sequence) -> int:
        """KV a running sequence holds itself now (``kv_used_tokens`` sums these; a finished
        one's, what it held as it left)."""
        return self._held(seq, self.step_index)

    def _join(self, seq: Sequence, step: int) -> None:
        """``seq`` made token ``recompute`` (its first after a prefill) in ``step``: it grows
        from there."""
        seq.grow_from = step
        self._residues[(1 - seq.prefill_target + step) % self.block][seq.id] = seq

    def _leave(self, seq: Sequence, through: int) -> int:
        """``seq`` stops decoding after the blocks of step ``through``: what it held itself."""
        self._residues[(1 - seq.prefill_target + seq.grow_from) % self.block].pop(seq.id, None)
        return self._held(seq, through)

    # -- free blocks -------------------------------------------------------------------------

    def _kv_free(self) -> int:
        """KV not held by anyone (unreferenced cached prefixes count as held: evict first)."""
        used = self.background.kv_tokens + self._kv_used
        if self.cache is not None:
            used += self.cache.size
        return self.kv_capacity - used

    def _take(self, tokens: int) -> bool:
        """Make room for ``tokens`` more tokens of blocks, evicting unreferenced cached
        prefixes if need be, then those only waiting requests pin (in vLLM a waiting request
        holds no block: its hits are looked up when it is scheduled)."""
        free = self._kv_free()
        cache = self.cache
        if free < tokens and cache is not None:
            free += cache.evict(tokens - free)
            if free < tokens and cache.pinned:
                cache.unpin_waiting(self.waiting, self.busy_until)
                free += cache.evict(tokens - free)
        return free >= tokens

    # -- a step ------------------------------------------------------------------------------

    def _grow(self, index: int) -> bool:
        """Before step ``index``: give every decoder whose blocks are full one more, preempting
        the newest running requests while none is free. True if any was preempted."""
        due = self._residues[index % self.block]
        if not due:
            return False
        b = self.block
        if self._take(b * len(due)):  # room for all: the usual case
            self._kv_used += b * len(due)
            return False
        preempted = False
        for seq in sorted(due.values(), key=lambda s: s.rank):  # oldest first, as vLLM's running
            if seq.state != DECODE:
                continue  # preempted for an older one meanwhile
            while not self._take(b):
                victim = self._admitted[next(reversed(self._admitted))]
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                self._kv_used += b
        return preempted

    def _preempt(self, seq: Sequence) -> None:
        """Recompute-mode preemption: free all of ``seq``'s KV and queue it first."""
        del self._admitted[seq.id]
        if seq.state == DECODE:
            del self.decoding[seq.id]
            made = seq.tokens_after(self.step_index)
            self._decode_ctx -= seq.prompt_tokens + made
            self._kv_used -= self._leave(seq, self.step_index)
            seq.pause(self.step_index)
            seq.recompute = made
            seq.paused_at = self.busy_until  # the end of the step that made its last token
        else:  # still prefilling: what it prefilled is lost too
            self.prefilling.remove(seq)
            self._kv_used -= seq.kv_held
        seq.kv_held = seq.kv_blocks = 0
        seq.finish_step = seq.grow_from = -1
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

    def _blocks_in(self, first: int, steps: int) -> int:
        """Blocks the decoders take before steps ``first .. first + steps - 1``."""
        b, res = self.block, self._residues
        n = len(self.decoding)  # every decoder is in one residue class
        total = (steps // b) * n
        for t in range(first, first + steps % b):
            total += len(res[t % b])
        return total

    def _room(self, limit: int) -> int:
        """Steps from the next on (up to ``limit``) whose blocks all fit without preempting:
        a steady stretch runs no further."""
        avail = self._kv_free()
        if self.cache is not None:
            avail += self.cache.evictable
        b, res = self.block, self._residues
        avail //= b
        n = len(self.decoding)
        if n * -(-limit // b) <= avail:  # room for a block each per started cycle: all fit
            return limit
        first = self.step_index + 1
        if self._blocks_in(first, limit) <= avail:
            return limit
        steps = (avail // n) * b  # whole cycles of the residues fit (n > 0: some exceed)
        left = avail - (avail // n) * n
        while steps < limit:
            need = len(res[(first + steps) % b])
            if need > left:
                break
            left -= need
            steps += 1
        return steps

    def _grow_steady(self, first: int, steps: int) -> None:
        """A steady stretch ran steps ``first .. first + steps - 1``: the blocks they took
        (they fit: ``_room``)."""
        tokens = self.block * self._blocks_in(first, steps)
        if tokens:
            taken = self._take(tokens)
            assert taken, "a steady stretch ran past its KV"
            self._kv_used += tokens


__all__ = ["KvPaging", "round_up"]
