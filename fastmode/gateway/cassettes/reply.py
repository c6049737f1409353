"""A recorded reply in the shapes the pipeline reads: a ``Reply`` for settlement and stored
conversations, or a whole ``Generation`` for an engine to pace (``--replay-timing modeled`` /
``tier:NAME``).

Pieces are one per recorded content event: a token, for a provider or a fastmode engine that
streams a token per event. A reply that has fewer pieces than the tokens its usage counts (a
non-streamed body is one piece; a stream with ``stream_interval`` N has an event per N tokens)
is cut into tokens with fastmode's tokenizer before an engine paces it, so a modeled replay
takes as many decode steps as the recorded reply had tokens.
"""

from __future__ import annotations

from fastmode.backends.mockmodel import Generation, Piece, ToolCall
from fastmode.backends.tokenizer import tokenize
from fastmode.gateway.cassettes.transcript import Transcript


def tool_calls(tr: Transcript) -> tuple[ToolCall, ...]:
    args: list[list[str]] = [[] for _ in tr.tools]
    for p in tr.pieces:
        if 0 <= p.tool < len(args):
            args[p.tool].append(p.text)
    return tuple(ToolCall(cid, name, "".join(a)) for (cid, name), a in zip(tr.tools, args,
                                                                           strict=True))


def text(tr: Transcript) -> str:
    return "".join(p.text for p in tr.pieces if p.tool < 0)


class RecordedReply:
    """The ``Reply`` of a replayed exchange (``gateway.values.token_source``): what it said, and the
    output tokens its usage reported (billed as such)."""

    __slots__ = ("pieces", "text", "tool_calls", "finish_reason", "stop_sequence",
                 "output_tokens")
    reasoning = None
    reasoning_tokens = 0

    def __init__(self, tr: Transcript) -> None:
        self.pieces: tuple[Piece, ...] = tuple(tr.pieces)
        self.text = text(tr)
        self.tool_calls = tool_calls(tr)
        self.finish_reason = tr.finish_reason
        self.stop_sequence = tr.stop_sequence
        self.output_tokens = tr.output_tokens if tr.output_tokens is not None \
            else len(self.pieces)


def generation(tr: Transcript) -> Generation:
    """The recorded content as a whole reply for an engine: one piece per token."""
    pieces = list(tr.pieces)
    if tr.output_tokens is not None and len(pieces) < tr.output_tokens:
        pieces = [Piece(tok, p.tool) for p in pieces for tok in (tokenize(p.text) or [""])]
    return Generation(tuple(pieces), text(tr), tool_calls(tr), tr.finish_reason,
                      tr.stop_sequence)
