"""The Responses API's ``reasoning`` output item and its streaming events.

A reply that thought first has a reasoning item at output index 0 (the message or the function
calls follow it). The reasoning itself is never shown; with ``reasoning.summary`` set, the item
carries summary parts, streamed while the reasoning tokens are generated:
``response.reasoning_summary_part.added``, ``response.reasoning_summary_text.delta`` (spread
over the reasoning tokens, so a summary grows as the model thinks), ``...text.done``,
``...part.done``; the item is done with the last reasoning token. With
``include: ["reasoning.encrypted_content"]`` the finished item carries ``encrypted_content``
(``gateway.protocols.sealed``), which a client sends back on its next turn.

A model configured with ``raw_reasoning`` (``[behavior.MODEL]``: gpt-oss served by vLLM and the
like) shows the reasoning itself as the item's ``content``: one ``reasoning_text`` part,
opened with ``response.content_part.added``, one ``response.reasoning_text.delta`` per
reasoning token, closed with ``response.reasoning_text.done`` and ``...content_part.done``
(what the gpt-oss harness and vLLM's clients read); summaries and ``encrypted_content`` are
given as well when asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmode.backends.tokenizer import tokenize
from fastmode.gateway.protocols.events import Frames
from fastmode.gateway.protocols.sealed import reasoning_content
from fastmode.gateway.values.token_source import Reply

Event = Callable[[dict[str, Any]], bytes]


class ReasoningItem:
    """Tracks one reasoning item through the stream; ``event`` numbers and encodes an event."""

    def __init__(self, gen: Reply, item_id: str, encrypted: bool, event: Event,
                 raw: bool = False) -> None:
        reasoning = gen.reasoning
        self.gen = gen
        self.raw = raw  # the reasoning text as a ``reasoning_text`` content part
        self.shown: list[str] = []  # the raw reasoning streamed so far
        # an upstream's reply (gateway.remote) does not know where its reasoning ends: its
        # item closes with the first content, not with a last reasoning token
        self.open_ended = bool(getattr(gen, "live", False))
        self.tokens = gen.reasoning_tokens
        self.effort = reasoning.effort if reasoning is not None else "none"
        self.parts: tuple[str, ...] = reasoning.summary if reasoning is not None else ()
        self.id = item_id
        self.encrypted = encrypted
        self.event = event
        self.state = 0  # 0: not opened, 1: open, 2: done
        self.last = -1  # the last reasoning token whose events went out
        self.parts_done = 0
        self.plan = self._plan()

    def _plan(self) -> dict[int, list[tuple[str, int, str]]]:
        """Reasoning token index -> summary events due then: ("add"|"delta"|"done", part, text).
        Summary tokens are spread evenly over the reasoning tokens."""
        plan: dict[int, list[tuple[str, int, str]]] = {}
        split = [tokenize(p) for p in self.parts]
        total = sum(len(t) for t in split)
        if not total or not self.tokens:
            return plan
        s = 0
        for j, toks in enumerate(split):
            for k, tok in enumerate(toks):
                at = plan.setdefault(min(self.tokens - 1, s * self.tokens // total), [])
                if k == 0:
                    at.append(("add", j, ""))
                if at and at[-1][0] == "delta" and at[-1][1] == j:
                    at[-1] = ("delta", j, at[-1][2] + tok)
                else:
                    at.append(("delta", j, tok))
                if k == len(toks) - 1:
                    at.append(("done", j, ""))
                s += 1
        return plan

    def item(self, final: bool) -> dict[str, Any]:
        parts = self.parts if final else self.parts[: self.parts_done]
        out: dict[str, Any] = {
            "id": self.id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": p} for p in parts],
        }
        if self.raw:
            text = self.text() if final else "".join(self.shown)
            out["content"] = [{"type": "reasoning_text", "text": text}] if text or final else []
        if final and self.encrypted:
            out["encrypted_content"] = reasoning_content(self.id, self.tokens, self.effort)
        return out

    def text(self) -> str:
        reasoning = self.gen.reasoning
        return reasoning.text if reasoning is not None else "".join(self.shown)

    def at(self, i: int, text: str = "") -> Frames:
        """The events due with reasoning token ``i`` (``text``: the token)."""
        out = self._open()
        self.last = i
        if self.raw:
            out += self._raw_delta(text)
        for kind, j, part in self.plan.get(i, ()):
            out += self._summary(kind, j, part)
        if i == self.tokens - 1 and not self.open_ended:
            out += self._close()
        return out

    def finish(self) -> Frames:
        """Send whatever is still due and close the item; a no-op once done."""
        if self.state == 2:
            return []
        out = self._open()
        if self.raw:
            streamed = "".join(self.shown)
            rest = self.text()[len(streamed):]
            if rest:
                out += self._raw_delta(rest)
        for i in range(self.last + 1, self.tokens):
            for kind, j, text in self.plan.get(i, ()):
                out += self._summary(kind, j, text)
        return out + self._close()

    def _raw_delta(self, text: str) -> Frames:
        self.shown.append(text)
        return [("response.reasoning_text.delta", self.event({
            "type": "response.reasoning_text.delta", "item_id": self.id, "output_index": 0,
            "content_index": 0, "delta": text}))]

    def _open(self) -> Frames:
        if self.state:
            return []
        self.state = 1
        out = [("response.output_item.added", self.event({
            "type": "response.output_item.added", "output_index": 0, "item": self.item(False)}))]
        if self.raw:
            out.append(("response.content_part.added", self.event({
                "type": "response.content_part.added", "item_id": self.id, "output_index": 0,
                "content_index": 0, "part": {"type": "reasoning_text", "text": ""}})))
        return out

    def _close(self) -> Frames:
        self.state = 2
        out: Frames = []
        if self.raw:
            text = self.text()
            base = {"item_id": self.id, "output_index": 0, "content_index": 0}
            out += [
                ("response.reasoning_text.done", self.event({
                    "type": "response.reasoning_text.done", **base, "text": text})),
                ("response.content_part.done", self.event({
                    "type": "response.content_part.done", **base,
                    "part": {"type": "reasoning_text", "text": text}})),
            ]
        return out + [("response.output_item.done", self.event({
            "type": "response.output_item.done", "output_index": 0, "item": self.item(True)}))]

    def _summary(self, kind: str, j: int, text: str) -> Frames:
        base = {"item_id": self.id, "output_index": 0, "summary_index": j}
        if kind == "add":
            return [("response.reasoning_summary_part.added", self.event({
                "type": "response.reasoning_summary_part.added", **base,
                "part": {"type": "summary_text", "text": ""}}))]
        if kind == "delta":
            return [("response.reasoning_summary_text.delta", self.event({
                "type": "response.reasoning_summary_text.delta", **base, "delta": text}))]
        self.parts_done = j + 1
        part = self.parts[j]
        return [
            ("response.reasoning_summary_text.done", self.event({
                "type": "response.reasoning_summary_text.done", **base, "text": part})),
            ("response.reasoning_summary_part.done", self.event({
                "type": "response.reasoning_summary_part.done", **base,
                "part": {"type": "summary_text", "text": part}})),
        ]
