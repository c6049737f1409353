"""Prompt prefixes for simulated workloads, so ``fastmode simulate`` exercises the prefix cache.

Two things real traffic shares, both optional:

- a **shared system prompt** of ``shared_tokens`` that every request of a model starts with
  (added on top of the request's own prompt length);
- **conversations** (closed loop only, ``turns`` > 1): each user's requests are the turns of one
  conversation, and turn k's prompt is the whole conversation so far (the system prompt, every
  earlier prompt and reply) plus its own new prompt tokens. After ``turns`` turns, or when the
  next turn would not fit the context window, the user starts a new conversation.

The checkpoints a turn carries are the end of the shared prompt and the end of every earlier
turn's prompt (what the providers cache: prompts, not replies), plus its own prompt's end, which
it writes for the next turn. Hashes only need to be equal for equal prefixes within one run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastmode.backends.prefix_cache import PrefixKey

_INF = float("inf")


@dataclass
class _Conversation:
    number: int = 0  # the user's conversation count (part of every hash)
    turn: int = 0
    history: int = 0  # tokens of the conversation so far (prompts and replies)
    ends: list[int] = field(default_factory=list)  # prompt ends of earlier turns


class PromptPrefixes:
    def __init__(self, shared_tokens: int = 0, turns: int = 1) -> None:
        if shared_tokens < 0:
            raise ValueError("shared_tokens: must be >= 0")
        if turns < 1:
            raise ValueError("turns: must be >= 1")
        self.shared = shared_tokens
        self.turns = turns
        self._users: dict[int, _Conversation] = {}

    @property
    def active(self) -> bool:
        return self.shared > 0 or self.turns > 1

    def request(self, user: int, model: str, prompt: int, output: int,
                window: int) -> tuple[int, PrefixKey | None]:
        """The prompt length of a request (its own ``prompt`` tokens plus the shared prompt
        and, in a conversation, the history) and its prefix key."""
        points: list[int] = []
        hashes: list[int] = []
        if self.shared:
            points.append(self.shared)
            hashes.append(hash(("shared", model, self.shared)))
        base = self.shared
        conv = self._users.get(user) if user >= 0 and self.turns > 1 else None
        if user >= 0 and self.turns > 1:
            if conv is None:
                conv = self._users[user] = _Conversation()
            if conv.turn >= self.turns or base + conv.history + prompt + output > window:
                conv.number += 1
                conv.turn, conv.history, conv.ends = 0, 0, []
            for j, end in enumerate(conv.ends):
                points.append(base + end)
                hashes.append(hash(("turn", model, user, conv.number, j)))
        total = base + (conv.history if conv is not None else 0) + prompt
        if conv is not None:
            points.append(total - 1)  # this turn's prompt, written for the next turn
            hashes.append(hash(("turn", model, user, conv.number, conv.turn)))
            conv.ends.append(total - 1 - base)
            conv.history += prompt + output
            conv.turn += 1
        keep = [i for i, p in enumerate(points) if 0 < p < total and (i == 0 or p > points[i - 1])]
        if not keep:
            return total, None
        n = len(keep)
        return total, PrefixKey(tuple(points[i] for i in keep), tuple(hashes[i] for i in keep),
                                (True,) * n, (_INF,) * n)

    def forget(self, user: int) -> None:
        """A refused request: the user's conversation starts over."""
        self._users.pop(user, None)
