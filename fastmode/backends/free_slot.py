"""When a full replica frees a slot: the modeled time its first running sequence finishes.

A request refused because a pool is full (every waiting queue at its bound) can be taken as
soon as any running sequence of the pool finishes: the scheduler retires a sequence when it
plans the step that produces its last token, and from then its replica takes one more request
(``Scheduler.submit`` counts free slots). So the honest ``retry-after`` of a full pool is the
time until the first such step begins, which this module computes from the scheduler's public
state without changing it: each running sequence's remaining tokens (and, while prompts are
being prefilled, the steps their chunks take) times the modeled duration of each step.

The steps are played forward exactly as ``Scheduler.step`` would run them: prompt chunks
oldest first within the per-step token budget, one step at a time while any prompt is being
prefilled, then the decode-only steps in closed form (``backends.stretch``; a placement with
no closed form, e.g. speculative decoding, is bounded from above by its last step's duration).
It assumes nothing else changes the batch meanwhile (no cancellation, no other tenants' tick),
the assumption every modeled estimate of the gateway makes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from fastmode.backends.perf import prefill_attention_context
from fastmode.backends.scheduler import Scheduler, Sequence
from fastmode.backends.stretch import stretch


@dataclass(slots=True)
class _Prompt:
    """A prompt being prefilled in the play-forward (the sequence itself is not touched)."""

    seq: Sequence
    done: int  # prompt tokens prefilled so far


def free_slot_at(sched: Scheduler, now: float) -> float:
    """The modeled time (the scheduler's clock) at which this replica takes one more request
    than it can at ``now``: when the first running sequence's last step is planned; the start
    of the next step when nothing runs."""
    bg = sched.background
    start = max(now, sched.busy_until)  # the next step is planned when the one under way ends
    step = sched.step_index
    decoders = list(sched.decoding.values())
    # what the next step admits into free slots joins the prompts being prefilled (KV assumed
    # to fit): in a burst, every request is still waiting when the pool fills
    free = max(0, sched.limits.max_batch - bg.seqs - sched.running)
    joining = [seq for _, seq in zip(range(free), sched.waiting, strict=False)]
    pending = [_Prompt(seq, seq.prefilled) for seq in sched.prefilling]
    pending += [_Prompt(seq, seq.prefill_start) for seq in joining]
    if not decoders and not pending:
        return start
    # step j from now on (j = 1 is planned at `start`); a sequence frees its slot when its
    # last step is planned: a decoder's is the one that makes its remaining tokens
    last = min((seq.output_tokens - seq.tokens_after(step) for seq in decoders),
               default=math.inf)
    n = len(decoders)
    ctx = sum(seq.prompt_tokens + seq.tokens_after(step) for seq in decoders)
    elapsed, j = 0.0, 1  # the time from `start` to the planning of step j
    while pending and j < last:  # steps that carry prompt chunks: as Scheduler.step runs them
        budget = sched.limits.max_batched_tokens - n - bg.seqs - bg.prefill_tokens_per_step
        tokens, pctx, chunked = bg.prefill_tokens_per_step, bg.prefill_context, 0
        for p in pending:
            room = budget if budget > 0 else (1 if not chunked else 0)
            if room <= 0:
                break
            c = min(max(p.seq.prefill_target - p.done, 1), room)
            pctx += prefill_attention_context(c, p.done)
            tokens += c
            budget -= c
            p.done += c
            chunked += 1
        dt = sched.step_seconds(n + bg.seqs, ctx + bg.kv_tokens, tokens, pctx)
        ctx += n
        for p in pending[:chunked]:
            if p.done >= p.seq.prefill_target:  # its first token in step j (its next after
                n += 1  # a preemption), its last in j + output - recompute - 1
                ctx += p.seq.prefill_target + 1
                last = min(last, j + p.seq.output_tokens - p.seq.recompute - 1)
        if last <= j:  # a one-token reply: its slot frees as this very step is planned
            break
        elapsed += dt
        pending = [p for p in pending if p.done < p.seq.prefill_target]
        j += 1
    steps = int(last) - j  # decode-only steps before the freeing step is planned
    if steps > 0:
        elapsed += _decode_steps(sched, n, ctx, steps)
    return start + elapsed


def _decode_steps(sched: Scheduler, n: int, ctx: int, steps: int) -> float:
    """The duration of ``steps`` decode-only steps of ``n`` of our sequences (context ``ctx``,
    growing by ``n`` a step) beside the other tenants."""
    bg = sched.background
    placement = sched.placement
    if getattr(placement, "stepwise", False):  # no closed form: every step at the longest
        return steps * sched.step_seconds(n + bg.seqs, ctx + n * steps + bg.kv_tokens,
                                          bg.prefill_tokens_per_step, bg.prefill_context)
    line = placement.decode_line(n + bg.seqs, bg.prefill_tokens_per_step, bg.prefill_context)
    return stretch(line, ctx + bg.kv_tokens, n, steps, math.inf)[1]


def free_slot_in(schedulers: Iterable[Scheduler], now: float) -> float:
    """Seconds from ``now`` until any of a pool's replicas takes one more request (the
    earliest ``free_slot_at``); 0 for a pool with no replica."""
    return max(0.0, min((free_slot_at(s, now) for s in schedulers), default=now) - now)
