"""The batch pool: where OpenAI's Batch API and Anthropic's Message Batches run, modeled.

Batch jobs are the slow, cheap end of the speed/price ladder this project is about: the same
model on the same hardware, run at the largest batch the KV cache holds, so each token shares
a long step with many others (cheap: half the price, as the providers charge) and each request
takes long (results within a completion window, not a stream). Like flex, it is a placement
at a large ``max_batch``, full of other tenants' sequences (prompt + output / 2 of context,
their fresh prompts prefilled alongside); unlike flex nobody waits on it, so it is modeled
ahead of time instead of paced live: a batch's requests take ``slots`` slots of the pool in
file order, each for its prefill chunks and one step per output token
(``finish_times``: list scheduling, deterministic), and a token costs the hardware time of a
step shared by ``max_batch`` sequences (``cost_per_token``; its price is that cost relative to
the reference tier's, as derived tier prices are).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from fastmode.backends.background import Background
from fastmode.backends.perf import Placement
from fastmode.backends.pricing import hardware_cost_per_token


@dataclass(frozen=True)
class BatchPool:
    placement: Placement
    max_batch: int
    max_batched_tokens: int
    prompt_tokens: int  # the pool's typical request
    output_tokens: int
    slots: int  # requests of one batch running at once

    @property
    def background(self) -> Background:
        """The pool full: every other slot held, their fresh prompts prefilled alongside."""
        fresh = min(self.max_batched_tokens - self.max_batch,
                    round(self.max_batch * self.prompt_tokens / self.output_tokens))
        return Background(self.max_batch - 1, self.prompt_tokens + self.output_tokens // 2,
                          max(0, fresh))

    def step_seconds(self) -> float:
        bg = self.background
        batch = bg.seqs + 1
        return self.placement.step_seconds(batch, batch * bg.context_tokens,
                                           bg.prefill_tokens_per_step, bg.prefill_context)

    def cost_per_token(self) -> float:
        """USD of hardware time per output token at the pool's operating point."""
        return hardware_cost_per_token(self.placement, self.background)

    def finish_times(self, requests: Sequence[tuple[int, int]]) -> list[float]:
        """Modeled seconds from submission until each (prompt, output) request is done."""
        step = self.step_seconds()
        free = [0.0] * min(self.slots, max(1, len(requests)))
        heapq.heapify(free)
        out = []
        for prompt, output in requests:
            start = heapq.heappop(free)
            steps = math.ceil(max(prompt, 1) / self.max_batched_tokens) + max(output, 1)
            done = start + steps * step
            heapq.heappush(free, done)
            out.append(done)
        return out
