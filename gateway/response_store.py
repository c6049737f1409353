"""Stored responses, for ``previous_response_id``, kept in the shared state (``gateway.state``).

Translation is synchronous, so the pipeline first awaits ``load`` (which brings a response
stored by any process into memory) and translation then reads ``get`` from memory. A websocket
connection layers its own recent responses on top (kept even with ``store: false``, as OpenAI's
websocket mode does), so ``remember`` says whether an item may be kept beyond it.
"""

from __future__ import annotations

from .state import StateBackend, StoredResponse
from .state.base import ResponseCache

__all__ = ["ConnectionStore", "ResponseStore", "StoredResponse"]


class ResponseStore:
    """The gateway's stored responses: write-behind to the state, reads from its memory."""

    def __init__(self, state: StateBackend) -> None:
        self.state = state

    def put(self, item: StoredResponse) -> None:
        self.state.put_response(item)

    def get(self, rid: str) -> StoredResponse | None:
        return self.state.cached_response(rid)

    async def load(self, rid: str) -> StoredResponse | None:
        return await self.state.get_response(rid)

    def remember(self, item: StoredResponse, persist: bool) -> None:
        """Keep ``item`` for continuation; ``persist`` is the request's ``store`` flag."""
        if persist:
            self.put(item)


class ConnectionStore(ResponseStore):
    """A websocket connection's own recent responses (bounded LRU), then the shared store."""

    def __init__(self, shared: ResponseStore, capacity: int = 16) -> None:
        super().__init__(shared.state)
        self.shared = shared
        self.capacity = capacity
        self._items = ResponseCache(capacity)

    def get(self, rid: str) -> StoredResponse | None:
        return self._items.get(rid) or self.shared.get(rid)

    async def load(self, rid: str) -> StoredResponse | None:
        return self._items.get(rid) or await self.shared.load(rid)

    def remember(self, item: StoredResponse, persist: bool) -> None:
        self._items.keep(item)  # kept for this connection even with store: false
        if persist:
            self.shared.put(item)
