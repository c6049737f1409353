"""One request inside an engine (``Sequence``) and the steps in which it made its tokens.

A sequence that is never preempted makes token ``k`` in step ``first_step + k``: its token
count is the step index alone, which is what lets a replica step without walking its batch.
A preempted one (``backends.kv_paging``) pauses: it makes no token from the step it was
preempted in until the step that ends its recompute, which makes its next token, and from
there one a step again. Each such run of steps is a *segment*; ``tokens_after`` and
``step_of`` read them, so a driver times every token from the steps that really made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastmode.backends.prefix_cache import PrefixKey

WAITING, PREFILL, DECODE, FINISHED, CANCELLED = (
    "waiting",
    "prefill",
    "decode",
    "finished",
    "cancelled",
)

_NEVER = 1 << 62  # a step index no replica reaches: a segment still open


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine. ``tag`` is the driver's (e.g. where to send tokens)."""

    id: int
    prompt_tokens: int
    output_tokens: int
    arrival: float
    cached_tokens: int = 0  # prefix already in the KV cache (a continuation): no prefill
    tag: Any = None
    prefix: PrefixKey | None = None  # where its prompt may be cut and cached
    cache_hit: int = 0  # prompt tokens found in this replica's prefix cache
    cache_entry: Any = None  # the cache chain it pins (backends.prefix_cache)
    kv_held: int = 0  # KV it holds itself (the rest of its blocks is shared cache)
    priority: int = 0  # a shared pool admits higher priorities first (fleet policy "priority")
    lora: Any = None  # the LoRA adapter it runs on (backends.lora.LoraAdapter), None: the base
    remote_kv_s: float = 0.0  # P/D: its KV comes from a prefill engine, this long once admitted
    kv_ready_at: float = 0.0  # ... and is in from then on (backends.kv_transfer)
    state: str = WAITING
    prefilled: int = 0
    first_step: int = -1  # index of the step that produced token 0
    admitted_at: float = -1.0
    first_token_at: float = -1.0
    finished_at: float = -1.0
    # paging (backends.kv_paging): tokens of KV its blocks held when it started decoding
    # (shared cache included), the step it did, the step of its last token, its admission rank
    kv_blocks: int = 0
    grow_from: int = -1
    finish_step: int = -1
    rank: int = 0
    preemptions: int = 0  # times it was preempted (its KV freed, recomputed later)
    recompute: int = 0  # tokens it made before its last preemption: prefilled again
    paused_at: float = -1.0  # modeled time of its last token before that preemption
    relook: bool = False  # preempted: looks for its cached prefix again when next admitted
    # segments after a preemption: (first step, first token, last step) each; None: one run
    segments: list[tuple[int, int, int]] | None = None

    @property
    def kv_reserved(self) -> int:
        """The KV its whole reply reaches: prompt and output."""
        return self.prompt_tokens + self.output_tokens

    @property
    def prefill_target(self) -> int:
        """Tokens its (re)prefill computes: the prompt, and after a preemption the tokens it
        had made too (vLLM's recompute)."""
        return self.prompt_tokens + self.recompute

    @property
    def prefill_start(self) -> int:
        """Where its prefill starts: the prefix it arrived with or found cached; after a
        preemption, only what the cache holds now (its own KV was freed)."""
        return self.cache_hit if self.preemptions else self.cached_tokens

    @property
    def paused(self) -> bool:
        """Preempted and not yet making tokens again: its count stands still."""
        segs = self.segments
        return segs is not None and segs[-1][2] != _NEVER

    def tokens_after(self, step_index: int) -> int:
        """Tokens produced once step ``step_index`` has run."""
        first = self.first_step
        if first < 0 or step_index < first:
            return 0
        if self.segments is None:
            return min(self.output_tokens, step_index - first + 1)
        for start, base, last in reversed(self.segments):
            if step_index >= start:
                return min(self.output_tokens, base + min(step_index, last) - start + 1)
        return 0  # (unreachable: the first segment starts at ``first_step``)

    def step_of(self, k: int) -> int:
        """The step that makes (or made) token ``k``; ``_NEVER``-like for a token a paused
        sequence has yet to make (the step is not known until it resumes)."""
        if self.segments is None:
            return self.first_step + k
        for start, base, last in reversed(self.segments):
            if k >= base:
                step = start + k - base
                return step if step <= last else _NEVER
        return self.first_step + k

    def pause(self, last_step: int) -> None:
        """Preempted: its current segment ends at ``last_step`` (its last token's step)."""
        segs = self.segments
        if segs is None:
            self.segments = [(self.first_step, 0, last_step)]
        else:
            start, base, _ = segs[-1]
            segs[-1] = (start, base, last_step)

    def resume(self, step: int) -> None:
        """Its recompute ended in ``step``, which makes token ``recompute``."""
        assert self.segments is not None
        self.segments.append((step, self.recompute, _NEVER))


NEVER = _NEVER

__all__ = ["CANCELLED", "DECODE", "FINISHED", "NEVER", "PREFILL", "WAITING", "Sequence"]
