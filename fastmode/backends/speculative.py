"""Speculative decoding as a deployment mechanism, on the same roofline as everything else.

A small draft model proposes ``k`` tokens one after another; the target model checks all of them
in one forward pass (each sequence carries ``k + 1`` tokens through the step) and keeps the
longest accepted prefix plus one token of its own. With a per-token acceptance rate ``alpha``
the expected tokens per such cycle are (Leviathan, Kalman & Matias, ICML 2023)

    E = (1 - alpha^(k+1)) / (1 - alpha)

and the output distribution is exactly the target's: quality is unchanged. A cycle costs

    t_cycle = t_verify(B sequences x (k + 1) tokens) + k * t_draft(B)

where ``t_verify`` is ``Placement.step`` with the ``B * k`` extra tokens riding along as prompt
tokens that attend to each sequence's context, and ``t_draft`` is the draft model's own step on
``draft_chips`` chips of the same node (without the host overhead: the drafting loop runs inside
the engine step). ``SpeculativePlacement`` reports a step of ``t_cycle / E``, so the scheduler's
"one token per sequence per step" holds on average: per-user speed, throughput, the hardware cost
per token (hence the derived price) and the step breakdown all follow. Prompt tokens are not
speculated: a cycle carries E steps' worth of them, so they cost what they cost without a draft
(plus the draft's own prefill), and time to first token does not improve.

What it leaves out: tokens arrive at the mean rate rather than in bursts of accepted drafts; the
acceptance rate is a constant, not a function of the text; tree drafting (EAGLE-2, Medusa) is a
higher acceptance at a higher verify cost, expressible by the two parameters. The stepwise flag
tells the scheduler there is no closed form for a stretch of these steps, so the virtual clock
steps them one by one (exact, slower).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from fastmode.backends.perf import Placement, StepTime
from fastmode.backends.profiles import ModelProfile, ProfileError


def tokens_per_cycle(draft_tokens: int, acceptance: float) -> float:
    """Expected tokens per verify step: the accepted drafts plus the target's own token."""
    if not 0 < acceptance < 1:
        raise ValueError(f"acceptance: must be in (0, 1), got {acceptance}")
    if draft_tokens < 1:
        raise ValueError(f"draft_tokens: must be >= 1, got {draft_tokens}")
    return (1 - acceptance ** (draft_tokens + 1)) / (1 - acceptance)


@dataclass(frozen=True)
class SpeculativePlacement(Placement):
    """The target model on its chips with a draft model beside it (see the module doc)."""

    draft: Placement | None = field(default=None, compare=False)
    draft_tokens: int = 4
    acceptance: float = 0.7

    stepwise = True  # no closed-form line for a stretch: the scheduler steps one by one

    def __post_init__(self) -> None:
        if self.draft is None:
            raise ValueError("speculative: a draft placement is required")
        tokens_per_cycle(self.draft_tokens, self.acceptance)  # validates k and alpha
        super().__post_init__()

    @property
    def tokens_per_cycle(self) -> float:
        return tokens_per_cycle(self.draft_tokens, self.acceptance)

    @property
    def weight_bytes(self) -> float:
        """Both models' weights sit in the replica's memory."""
        assert self.draft is not None
        return self.model.weight_bytes(self.precision) + self.draft.weight_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        """Every token of context has KV in both models."""
        assert self.draft is not None
        return super().kv_bytes_per_token + self.draft.kv_bytes_per_token

    def step(
        self,
        decode_seqs: int,
        decode_context_tokens: float,
        prefill_tokens: int = 0,
        prefill_context_tokens: float = 0.0,
    ) -> StepTime:
        assert self.draft is not None
        target = super().step
        draft = self.draft.step
        k = self.draft_tokens
        if decode_seqs == 0:  # prefill only: both models read the prompt, nothing is drafted
            t = target(0, 0.0, prefill_tokens, prefill_context_tokens)
            d = draft(0, 0.0, prefill_tokens, prefill_context_tokens)
            extra = d.total_s - d.breakdown.get("overhead_s", 0.0)
            return StepTime(t.total_s + extra, t.bound, {**t.breakdown, "draft_s": extra})
        # One scheduler step is 1/E of a verify cycle: a cycle yields E tokens per decoding
        # sequence and carries E steps' worth of prompt tokens, so prompts are processed at the
        # same cost per token as without drafting (the first token is not faster).
        e = self.tokens_per_cycle
        pre = int(round(prefill_tokens * e))
        pre_ctx = prefill_context_tokens * e
        verify = target(
            decode_seqs,
            decode_context_tokens,
            pre + decode_seqs * k,
            pre_ctx + k * decode_context_tokens,
        )
        one = draft(decode_seqs, decode_context_tokens, pre, pre_ctx)
        rest = draft(decode_seqs, decode_context_tokens)
        drafting = sum(
            s.total_s - s.breakdown.get("overhead_s", 0.0) for s in (one, *[rest] * (k - 1))
        )
        parts = {key: v / e for key, v in verify.breakdown.items()}
        parts["draft_s"] = drafting / e
        return StepTime((verify.total_s + drafting) / e, verify.bound, parts)


def mtp_draft(model: ModelProfile) -> ModelProfile:
    """The model's own multi-token-prediction module as a draft (DeepSeek-V3's MTP: one more
    transformer block of the model's shape sharing its embeddings and LM head, "DeepSeek-V3
    Technical Report" section 2.2): one layer's parameters plus the LM head, one layer of KV.
    A model that ships no such module (``mtp_layers = 0``) has nothing to draft with."""
    if not model.mtp_layers:
        raise ProfileError(f"speculative 'mtp': {model.name} has no multi-token-prediction "
                           "layer (mtp_layers = 0); name a draft model instead")
    layers = max(1, model.layers)
    emb = model.embedding_params_b
    body = (model.total_params_b - emb) / layers
    experts = model.expert_params_b / layers
    attn = model.attention_params / layers
    return replace(
        model, name=f"{model.name}-mtp", layers=1, total_params_b=body + emb,
        active_params_b=(model.active_params_b - emb) / layers + emb,
        expert_params_b=experts, attention_params_b=attn,
        bf16_params_b=None if model.bf16_params_b is None else min(
            model.bf16_params_b, emb + (model.bf16_params_b - emb) / layers),
        description=f"multi-token-prediction layer of {model.name}",
    )


def speculative_placement(
    target: Placement, draft_model: ModelProfile, draft_chips: int, draft_tokens: int,
    acceptance: float,
) -> SpeculativePlacement:
    """``target`` with a draft of ``draft_model`` (a ``ModelProfile``) on ``draft_chips`` of
    its chips, same precision and placement options."""
    chips = min(draft_chips, target.chips)
    ep = target.expert_parallel if draft_model.is_moe and chips % target.expert_parallel == 0 \
        else 1
    draft = replace(target, model=draft_model, chips=chips, expert_parallel=ep)
    base = {f.name: getattr(target, f.name) for f in fields(Placement)}
    return SpeculativePlacement(**base, draft=draft, draft_tokens=draft_tokens,
                                acceptance=acceptance)
