"""From a reply to output tokens: the ``max_tokens`` cut, stop sequences, argument pieces.

Pieces always rebuild the final text (or a tool call's arguments) exactly and each is one token
of ``backends.tokenizer``, so token counts agree everywhere (usage, pacing, billing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fastmode.backends.mockmodel.request import REASONING, Generation, Piece, Reasoning, ToolCall
from fastmode.backends.tokenizer import tokenize


def finish_text(text: str, cap: int | None, stop: Sequence[str],
                tokens: list[str] | None = None) -> Generation:
    """Apply the max_tokens cut, then stop sequences; pieces always match the final text.
    ``tokens``: ``text`` already split (``tokenize``), when the writer split it as it wrote."""
    return finish_tokens(tokenize(text) if tokens is None else tokens, cap, stop, text)


def finish_tokens(tokens: list[str], cap: int | None, stop: Sequence[str],
                  text: str | None = None) -> Generation:
    """``finish_text`` of the text these tokens join into (``text``, if it was joined already:
    a writer's tokens are joined once, after the cut)."""
    finish = "stop"
    if cap is not None and len(tokens) > cap:
        tokens = tokens[: max(cap, 0)]
        text = None
        finish = "length"
    if text is None:
        text = "".join(tokens)
    cut = stop_index(text, stop)
    matched = None
    if cut is not None:
        matched = next(st for st in stop if st and text.startswith(st, cut))
        text = text[:cut]
        tokens = tokenize(text)
        finish = "stop"
    pieces = _PIECES
    if len(pieces) > MAX_SHARED_PIECES:  # texts from outside (scripts, tool results) add more
        pieces.clear()
    return Generation(tuple(map(pieces.__getitem__, tokens)), text, (), finish, matched)


class _Pieces(dict[str, Piece]):
    """Pieces are immutable and the text bank's vocabulary is small: one per token text,
    looked up at C speed (``map`` over ``__getitem__``), made on a miss."""

    def __missing__(self, token: str) -> Piece:
        piece = self[token] = Piece(token)
        return piece


_PIECES = _Pieces()
MAX_SHARED_PIECES = 1 << 16


def stop_index(text: str, stop: Sequence[str]) -> int | None:
    """Index of the earliest occurrence of any (non-empty) stop string, or None."""
    hits = [i for s in stop if s and (i := text.find(s)) >= 0]
    return min(hits) if hits else None


def finish_tool_call(call: ToolCall, cap: int | None) -> Generation:
    """Pieces are the argument tokens (tool=0); a cap truncates the arguments themselves."""
    return finish_tool_calls([call], cap)


def finish_tool_calls(calls: Sequence[ToolCall], cap: int | None) -> Generation:
    """Call k's argument tokens are pieces with tool=k, call after call. A cap truncates the
    call it falls in and drops the calls after it."""
    pieces: list[Piece] = []
    kept: list[ToolCall] = []
    finish = "tool_calls"
    for k, call in enumerate(calls):
        tokens = tokenize(call.arguments)
        room = None if cap is None else cap - len(pieces)
        if room is not None and len(tokens) > room:
            finish = "length"
            if room <= 0 and kept:
                break
            tokens = tokens[: max(room, 0)]
            call = dataclasses.replace(call, arguments="".join(tokens))
        pieces.extend(Piece(t, k) for t in tokens)
        kept.append(call)
        if finish == "length":
            break
    return Generation(pieces=tuple(pieces), text="", tool_calls=tuple(kept), finish_reason=finish)


def with_reasoning(gen: Generation, reasoning: Reasoning | None) -> Generation:
    """The reply preceded by its reasoning tokens (generated first, billed as output)."""
    if reasoning is None:
        return gen
    thought = tuple(Piece(t, REASONING) for t in tokenize(reasoning.text))
    if len(thought) != reasoning.tokens:  # the text is a token prefix: never, but stay exact
        reasoning = dataclasses.replace(reasoning, tokens=len(thought))
    return Generation(thought + gen.pieces, gen.text, gen.tool_calls, gen.finish_reason,
                      gen.stop_sequence, reasoning)
