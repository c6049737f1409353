"""Prefill/decode disaggregation for the scheduler: prompts on a separate prefill replica.

A disaggregated deployment (``[deployments.NAME] prefill_chips = N``; NVIDIA Dynamo, SGLang
and vLLM P/D, TensorRT-LLM's disaggregated serving) pairs each decode replica with a prefill
replica of N chips. ``DisaggregatedScheduler`` is the decode replica's scheduler:

- an admitted request's prompt goes to the prefill replica, which serves prompts one after
  another (FCFS), each in chunks of the step budget (``Placement.prefill_seconds`` on the
  prefill placement); the other tenants' prompts (the background's prefill tokens) take their
  share of it, which stretches every prompt by 1 / (1 - their share);
- its KV cache then crosses the interconnect (``perf_modes.kv_transfer_seconds``) and the
  sequence joins the decode batch at the first step that starts after it arrived; that step
  emits its first token (the time to first token is the prefill queue, the prefill, the
  transfer and one decode step);
- decode steps carry no prompt tokens, so the other users' prompts never slow a stream;
- while prompts are in flight and no sequence decodes, the replica idles until the first KV
  arrives (a step of no tokens).

The price: the prefill chips are paid by the deployment (``DeploymentSpec.cost_per_token``).
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from fastmode.backends.background import Background
from fastmode.backends.perf import Placement
from fastmode.backends.perf_modes import kv_transfer_seconds
from fastmode.backends.scheduler import CANCELLED, Limits, Scheduler, Sequence, StepResult

_SHARE_MAX = 0.95  # a prefill replica the background keeps busier than this is saturated


class DisaggregatedScheduler(Scheduler):
    """A decode replica whose prompts are prefilled elsewhere (see the module doc)."""

    paging = False  # the KV it receives is reserved for the whole reply: no preemption here

    def __init__(self, placement: Placement, limits: Limits, background: Background,
                 prefill: Placement) -> None:
        super().__init__(placement, limits, replace(background, prefill_tokens_per_step=0))
        self.prefill = prefill
        self._remote: list[tuple[float, int, Sequence]] = []  # (KV arrives at, id, sequence)
        self._prefill_free = 0.0
        self._memo: dict[int, float] = {}
        self._bg_share = 0.0
        self._set_share(background)

    def _set_share(self, background: Background) -> None:
        """The share of the prefill replica the other tenants' prompts take."""
        if background.prefill_tokens_per_step <= 0:
            self._bg_share = 0.0
            return
        per_token = self._prefill_time(8192) / 8192
        per_s = background.prefill_tokens_per_step / max(1e-9, self.decode_estimate())
        self._bg_share = min(_SHARE_MAX, per_s * per_token)

    def set_background(self, background: Background) -> None:
        super().set_background(replace(background, prefill_tokens_per_step=0))
        self._set_share(background)

    def _prefill_time(self, tokens: int) -> float:
        t = self._memo.get(tokens)
        if t is None:
            t = self._memo[tokens] = self.prefill.prefill_seconds(
                max(1, tokens), self.limits.max_batched_tokens)
        return t

    @property
    def running(self) -> int:
        return len(self._remote) + len(self.prefilling) + len(self.decoding)

    @property
    def has_work(self) -> bool:
        return bool(self._remote) or super().has_work

    def steady(self) -> bool:
        return not self._remote and super().steady()

    def _admit(self, now: float) -> None:
        super()._admit(now)
        for seq in self.prefilling:  # just admitted: off to the prefill replica
            start = max(now, self._prefill_free)
            done = start + self._prefill_time(seq.prompt_tokens - seq.prefilled) / (
                1.0 - self._bg_share)
            self._prefill_free = done
            arrive = done + kv_transfer_seconds(self.placement, self.prefill.chips,
                                                seq.prompt_tokens)
            heapq.heappush(self._remote, (arrive, seq.id, seq))
        self.prefilling.clear()

    def _drop_cancelled(self) -> list[Sequence]:
        gone = [s for _, _, s in self._remote if s.id in self._cancelled]
        if gone:
            ids = {s.id for s in gone}
            self._remote = [r for r in self._remote if r[1] not in ids]
            heapq.heapify(self._remote)
            for seq in gone:
                self._cancelled.discard(seq.id)
                self._kv_used -= seq.kv_held
                self._unpin(seq, self.busy_until)
                seq.state = CANCELLED
        return gone + super()._drop_cancelled()

    def step(self, now: float) -> StepResult | None:
        self._drop_cancelled()
        self._admit(now)
        ready: list[Sequence] = []
        while self._remote and self._remote[0][0] <= now:
            ready.append(heapq.heappop(self._remote)[2])
        index = self.step_index + 1
        if not ready and not self.decoding:
            if not self._remote:
                return None
            until = self._remote[0][0]  # idle until the first KV arrives
            self.step_index, self.busy_until = index, until
            return StepResult(index, now, until, 0, batch=self.background.seqs)
        bg = self.background
        n_dec = len(self.decoding)
        joining = sum(s.prompt_tokens for s in ready)
        dt = self.step_seconds(n_dec + len(ready) + bg.seqs,
                               self._decode_ctx + joining + bg.kv_tokens, 0, 0.0)
        end = now + dt
        result = StepResult(index, now, end, n_dec, batch=n_dec + len(ready) + bg.seqs)
        self._decode_ctx += n_dec
        for seq in ready:
            seq.prefilled = seq.prompt_tokens
            self._first_token(seq, index, end, result)
        self.step_index = index
        self.busy_until = end
        self._retire(index, end, result.finished)
        return result


__all__ = ["DisaggregatedScheduler"]
