"""The scheduler's step times through memos of the roofline's decode line.

``Placement.decode_line`` is the step time as a piecewise-linear function of the decode
context for one batch and prompt chunk; a workload of few lengths meets few (batch, chunk)
pairs, so a step costs a few float operations instead of a roofline evaluation. A mixin of
``backends.scheduler.Scheduler``: it reads the replica's placement, background and batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastmode.backends.perf import Placement

if TYPE_CHECKING:
    from fastmode.backends.background import Background


class StepMemo:
    placement: Placement
    background: Background
    _lines: dict[int, tuple[float, ...]]
    _step_lines: dict[tuple[int, int, float], tuple[float, ...]]
    _stepwise: bool
    _decode_ctx: int

    @property
    def running(self) -> int:
        raise NotImplementedError

    def _line(self, batch: int) -> tuple[float, ...]:
        """``decode_line`` of a batch of ``batch`` decoding sequences (background included)."""
        line = self._lines.get(batch)
        if line is None:
            bg = self.background
            line = self._lines[batch] = self.placement.decode_line(
                batch, bg.prefill_tokens_per_step, bg.prefill_context
            )
        return line

    def step_seconds(
        self, batch: int, ctx: float, prefill_tokens: int, prefill_ctx: float
    ) -> float:
        """``Placement.step_seconds`` through a memo of its line in the decode context: steps
        with the same batch and prompt chunk (most, in a workload of few lengths) then cost a
        few float operations instead of a roofline evaluation (bounded memo)."""
        if self._stepwise:
            return self.placement.step_seconds(batch, ctx, prefill_tokens, prefill_ctx)
        key = (batch, prefill_tokens, prefill_ctx)
        memo = self._step_lines
        line = memo.get(key)
        if line is None:
            if len(memo) >= 4096:
                memo.clear()
            line = memo[key] = self.placement.decode_line(batch, prefill_tokens, prefill_ctx)
        w, c0, c1, k1, floor, fixed = line
        x = c0 + c1 * ctx
        core = (w if w > x else x) + k1 * ctx
        return (core if core > floor else floor) + fixed

    def decode_estimate(self) -> float:
        """Seconds of a decode step of the batch as it is (no prompt of ours riding along): how
        long one token of the other tenants takes now."""
        bg = self.background
        batch = max(1, self.running + bg.seqs)
        ctx = self._decode_ctx + bg.kv_tokens
        if self._stepwise:
            return self.placement.step_seconds(
                batch, ctx, bg.prefill_tokens_per_step, bg.prefill_context
            )
        w, c0, c1, k1, floor, fixed = self._line(batch)
        x = c0 + c1 * ctx
        core = (w if w > x else x) + k1 * ctx
        return (core if core > floor else floor) + fixed
