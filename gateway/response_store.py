"""Stored responses, for ``previous_response_id``: bounded, in memory, per process.

A websocket connection layers its own recent responses on top (kept even with ``store: false``,
as OpenAI's websocket mode does), so ``remember`` says whether an item may be kept beyond it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class StoredResponse:
    """What a later turn needs from an earlier response to continue it."""

    id: str
    model: str
    messages: list[dict[str, Any]]  # the whole conversation, the reply included
    context_tokens: int  # prompt + output tokens of that response: cached for the next turn


class ResponseStore:
    """Bounded LRU of recent responses."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, item: StoredResponse) -> None:
        self._items[item.id] = item
        self._items.move_to_end(item.id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, rid: str) -> StoredResponse | None:
        return self._items.get(rid)

    def remember(self, item: StoredResponse, persist: bool) -> None:
        """Keep ``item`` for continuation; ``persist`` is the request's ``store`` flag."""
        if persist:
            self.put(item)


class ConnectionStore(ResponseStore):
    """A websocket connection's own recent responses, then the gateway's shared store."""

    def __init__(self, shared: ResponseStore, capacity: int = 16) -> None:
        super().__init__(capacity)
        self.shared = shared

    def get(self, rid: str) -> StoredResponse | None:
        return super().get(rid) or self.shared.get(rid)

    def remember(self, item: StoredResponse, persist: bool) -> None:
        self.put(item)  # kept for this connection even with store: false
        if persist:
            self.shared.put(item)
