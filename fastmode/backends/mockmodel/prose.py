"""The text writer: endless plausible prose about serving systems, cut to a length.

A reply's length is drawn first (``lengths``: lognormal around a median that depends on what
the user asked for), then whole chunks of prose are written until the length is reached; the
chunks never depend on the length, so a capped reply is a prefix of the uncapped one.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fastmode.backends.mockmodel.behavior import DEFAULT_BEHAVIOR, ReplyLengths
from fastmode.backends.mockmodel.draws import chooser, integers
from fastmode.backends.mockmodel.harness import user_task
from fastmode.backends.mockmodel.lengths import GREETING_REPLIES, reply_length, yes_no_opener
from fastmode.backends.mockmodel.phrases import bank, capitalized, tokens_of
from fastmode.backends.mockmodel.pieces import finish_text, finish_tokens
from fastmode.backends.mockmodel.request import Generation, GenerationRequest, message_text
from fastmode.backends.mockmodel.streams import Streams
from fastmode.backends.mockmodel.wordbank import GREETINGS, LIST_INTROS, TOPICS
from fastmode.backends.tokenizer import count_tokens


def text_reply(
    req: GenerationRequest, streams: Streams, opener: str | None,
    replies: ReplyLengths = DEFAULT_BEHAVIOR.replies,
) -> Generation:
    """Prose as long as the request calls for (``lengths``), cut by ``max_tokens`` and ``stop``;
    with ``ignore_eos``, exactly ``max_tokens`` tokens."""
    cap = req.max_tokens
    if req.ignore_eos and cap is not None:  # one token past the cap, so the cut says "length"
        tokens = write_tokens(streams("text"), cap + 1, opener)
        return finish_tokens(tokens, cap, req.stop)
    asked = last_user_text(req.messages)
    kind, natural = reply_length(asked, replies, streams("length"))
    if opener is None and kind == "greeting":
        thanks = "thank" in asked.lower() or "thx" in asked.lower()
        opener = GREETING_REPLIES[-1] if thanks else streams("opener").choice(GREETING_REPLIES[:-1])
        if natural <= 2 * count_tokens(opener):
            return finish_text(opener, cap, req.stop)
    elif opener is None:
        opener = yes_no_opener(asked, streams("opener")) if kind == "short" else None
    budget = natural if cap is None else min(natural, cap + 1)
    tokens = write_tokens(streams("text"), budget, opener)
    return finish_tokens(tokens, cap, req.stop)


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the conversation's last user message (what the reply answers) as far as
    the model reads it for cues (``cue_text``), without an agent harness's blocks
    (``harness``)."""
    return user_task(messages)[1]


def write_at_least(rng: random.Random, tokens: int, opener: str | None) -> str:
    """Whole chunks of prose until at least ``tokens`` tokens, ending at a chunk boundary.

    Chunk choice never depends on ``tokens``, so a shorter budget yields a prefix of a longer one.
    """
    return "".join(write_tokens(rng, tokens, opener))


def write_tokens(rng: random.Random, tokens: int, opener: str | None) -> list[str]:
    """``write_at_least``'s prose as its tokens. Chunks start with whitespace and end without
    it, so the tokens of the chunks are the tokens of the whole: each chunk is split once, and
    the reply is not split again (``finish_text``'s ``tokens``)."""
    out: list[str] = []
    for chunk in Writer(rng, opener).chunks():
        if len(out) >= tokens:
            break
        out += tokens_of(chunk)
    return out


def tool_result_opener(messages: Sequence[Mapping[str, Any]]) -> str:
    """First sentence after a tool result, naming the tool, so agent transcripts read well."""
    call_id = messages[-1].get("tool_call_id")
    name = next(
        (
            (call.get("function") or {}).get("name")
            for message in reversed(messages)
            for call in message.get("tool_calls") or ()
            if call.get("id") == call_id
        ),
        None,
    )
    if name:
        return f"Based on the result of {name}, here is what I found."
    return "Based on the tool output, here is what I found."


MAX_QUOTED_CHARS = 240  # of a tool's result in the answer after it


def tool_result_reply(req: GenerationRequest) -> Generation:
    """The answer after a tool result: the opener naming the tool, then what it returned (its
    first lines, up to ``MAX_QUOTED_CHARS``), and nothing more: the model answers from the
    result and stops, as a model does after a lookup."""
    opener = tool_result_opener(req.messages)
    results = []
    for message in reversed(req.messages):
        if message.get("role") != "tool":
            break
        results.append(" ".join(message_text(message).split()))
    quoted = " / ".join(r for r in reversed(results) if r)
    if len(quoted) > MAX_QUOTED_CHARS:
        quoted = quoted[:MAX_QUOTED_CHARS].rsplit(" ", 1)[0] + " …"
    text = f"{opener[:-1]}: {quoted}" if quoted else opener
    return finish_text(text, req.max_tokens, req.stop)


class Writer:
    """Endless plausible prose about serving systems, as whitespace-led chunks.

    Output is paragraphs of templated sentences with the occasional list, heading or short code
    block, so streamed replies look like a model's and are not one word repeated.
    """

    def __init__(self, rng: random.Random, opener: str | None) -> None:
        self.rng = rng
        self.opener = opener
        # ``rng.choice`` / ``rng.randint``, the same draws in one call each (``draws``)
        self.choice = chooser(rng)
        self.randint = integers(rng)
        self.phrases = bank()

    def chunks(self) -> Iterator[str]:
        rng = self.rng
        first = self.opener or (self.choice(GREETINGS) if rng.random() < 0.4 else None)
        if first is not None:
            yield first
        sep = " " if first is not None else ""
        while True:
            roll = rng.random()
            if roll < 0.08:
                yield "\n\n" + self.code_block()
            elif roll < 0.18:
                yield from self.bullet_list()
            else:
                yield from self.paragraph(sep)
            sep = "\n\n"

    def paragraph(self, sep: str) -> Iterator[str]:
        if sep and self.rng.random() < 0.1:
            yield f"{sep}### {capitalized(self.choice(TOPICS))}"
        for i in range(self.randint(2, 5)):
            yield (sep if i == 0 else " ") + self.sentence()

    def bullet_list(self) -> Iterator[str]:
        rng = self.rng
        yield "\n\n" + self.choice(LIST_INTROS)
        numbered = rng.random() < 0.5
        for i in range(self.randint(3, 5)):
            marker = f"{i + 1}." if numbered else "-"
            yield ("\n\n" if i == 0 else "\n") + f"{marker} {self.short_clause()}"

    def code_block(self) -> str:
        return self.choice(self.phrases.code_blocks)

    def short_clause(self) -> str:
        return self.choice(self.phrases.clauses)

    def sentence(self) -> str:
        """One of the bank's sentences (``phrases``): composed once, drawn in one call."""
        return self.choice(self.phrases.sentences)
