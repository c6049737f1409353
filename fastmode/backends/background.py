"""The other tenants' load as one replica's scheduler sees it (``backends.tenants`` publishes
it; the scheduler and its step-time memo read it)."""

from __future__ import annotations

from dataclasses import dataclass

from fastmode.backends.perf import prefill_attention_context


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
