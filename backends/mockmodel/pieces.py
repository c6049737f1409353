"""From a reply to output tokens: the ``max_tokens`` cut, stop sequences, argument pieces.

Pieces always rebuild the final text (or a tool call's arguments) exactly and each is one token
of ``backends.tokenizer``, so token counts agree everywhere (usage, pacing, billing).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ..tokenizer import tokenize
from .request import Generation, Piece, ToolCall


def finish_text(text: str, cap: int | None, stop: Sequence[str]) -> Generation:
    """Apply the max_tokens cut, then stop sequences; pieces always match the final text."""
    tokens = tokenize(text)
    finish = "stop"
    if cap is not None and len(tokens) > cap:
        tokens = tokens[: max(cap, 0)]
        text = "".join(tokens)
        finish = "length"
    cut = stop_index(text, stop)
    matched = None
    if cut is not None:
        matched = next(st for st in stop if st and text.startswith(st, cut))
        text = text[:cut]
        tokens = tokenize(text)
        finish = "stop"
    pieces = tuple(map(text_piece, tokens))
    return Generation(pieces, text, (), finish, matched)


@functools.lru_cache(maxsize=1 << 16)
def text_piece(token: str) -> Piece:
    """Pieces are immutable and the text bank's vocabulary is small: share them."""
    return Piece(token)


def stop_index(text: str, stop: Sequence[str]) -> int | None:
    """Index of the earliest occurrence of any (non-empty) stop string, or None."""
    hits = [i for s in stop if s and (i := text.find(s)) >= 0]
    return min(hits) if hits else None


def finish_tool_call(call: ToolCall, cap: int | None) -> Generation:
    """Pieces are the argument tokens (tool=0); a cap truncates the arguments themselves."""
    tokens = tokenize(call.arguments)
    finish = "tool_calls"
    if cap is not None and len(tokens) > cap:
        tokens = tokens[: max(cap, 0)]
        call = ToolCall(call.id, call.name, "".join(tokens), call.botched)
        finish = "length"
    pieces = tuple(Piece(t, 0) for t in tokens)
    return Generation(pieces=pieces, text="", tool_calls=(call,), finish_reason=finish)
