"""What a model does, as the config describes it: reasoning, reply lengths, parallel tool calls.

One ``ModelBehavior`` per model (``[behavior.MODEL]`` in the config, built by
``backends.engine``); a tier carries its model's. The quality profile (botching) stays per tier,
since the same model may be served well or badly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fastmode.backends.reasoning import NO_REASONING, ReasoningProfile

# Kinds of request, by the length of reply they call for (``lengths.classify``).
REPLY_KINDS = ("greeting", "short", "normal", "long")

# Median reply tokens per kind. "normal" is the unconstrained chat answer of a few paragraphs
# (the old single median); a greeting is one line, a yes/no or "briefly" question two or three
# sentences, a "long"/"detailed"/"essay"/"story" request several hundred words.
DEFAULT_REPLY_MEDIANS: Mapping[str, int] = {
    "greeting": 12, "short": 45, "normal": 200, "long": 900,
}  # fmt: skip


def _default_reply_medians() -> dict[str, int]:
    return dict(DEFAULT_REPLY_MEDIANS)


@dataclass(frozen=True)
class ReplyLengths:
    """How long visible replies are: lognormal around a median per kind of request."""

    median_tokens: Mapping[str, int] = field(default_factory=_default_reply_medians)
    sigma: float = 0.6  # ln-space spread of a kind's replies
    explicit_sigma: float = 0.12  # "in 300 words": the model lands near the number asked for
    min_tokens: int = 4
    max_tokens: int = 6000

    def median(self, kind: str) -> int:
        return int(self.median_tokens.get(kind, DEFAULT_REPLY_MEDIANS.get(kind, 200)))


@dataclass(frozen=True)
class ModelBehavior:
    reasoning: ReasoningProfile = NO_REASONING
    replies: ReplyLengths = field(default_factory=ReplyLengths)
    parallel_tool_share: float = 0.25  # turns with several tools offered that call 2+ at once
    max_parallel_tools: int = 3  # at most this many calls in one turn
    # OpenAI protocols show the reasoning text (vLLM / gpt-oss convention: Chat ``reasoning``,
    # Responses ``reasoning_text``); False: hidden, summaries only (OpenAI's hosted models)
    raw_reasoning: bool = False


DEFAULT_BEHAVIOR = ModelBehavior()
