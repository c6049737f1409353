"""Stored responses, for ``previous_response_id``, kept in the shared state (``gateway.state``),
as one caller sees them.

Translation is synchronous, so the pipeline first awaits ``load`` (which brings a response
stored by any process into memory) and translation then reads ``get`` from memory. A websocket
connection layers its own recent responses on top (kept even with ``store: false``, as OpenAI's
websocket mode does), so ``remember`` says whether an item may be kept beyond it.

Every store is a view for one caller (``gateway.stored.ownership``): what it keeps is stamped with the
caller's key id, and what it reads is filtered by it, over whichever backend holds the state. An
object of another key is a miss, exactly as an id nobody stored. ``app.state.responses`` is the
unscoped root (it sees nothing); each route asks it for ``seen_by(caller)``.
"""

from __future__ import annotations

from collections.abc import Callable

from fastmode.gateway.state import StateBackend, StoredResponse
from fastmode.gateway.state.base import ResponseCache
from fastmode.gateway.stored.ownership import NOBODY, Caller

__all__ = ["ConnectionStore", "ResponseStore", "StoredResponse"]


def _nobody() -> Caller:
    return NOBODY


class ResponseStore:
    """The gateway's stored responses: write-behind to the state, reads from its memory."""

    def __init__(self, state: StateBackend, who: Callable[[], Caller] = _nobody) -> None:
        self.state = state
        self._who = who
        self._caller: Caller | None = None

    @property
    def caller(self) -> Caller:
        """Who this store serves (asked once: it may be a 401)."""
        if self._caller is None:
            self._caller = self._who()
        return self._caller

    def seen_by(self, who: Caller | Callable[[], Caller]) -> ResponseStore:
        """The same responses as ``who`` sees them (a caller, or how to find it when needed)."""
        return ResponseStore(self.state, who if callable(who) else lambda: who)

    def _visible(self, item: StoredResponse | None) -> StoredResponse | None:
        return item if item is not None and self.caller.may_see(item.owner) else None

    def put(self, item: StoredResponse) -> None:
        item.owner = self.caller.owner
        self.state.put_response(item)

    def get(self, rid: str) -> StoredResponse | None:
        return self._visible(self.state.cached_response(rid))

    async def load(self, rid: str) -> StoredResponse | None:
        self.caller  # noqa: B018 - a request without a valid key is a 401 before any lookup
        return self._visible(await self.state.get_response(rid))

    async def reload(self, rid: str) -> StoredResponse | None:
        """``load`` past this process's memory (a response another process is updating)."""
        self.caller  # noqa: B018 - a 401 before any lookup
        return self._visible(await self.state.reload_response(rid))

    async def delete(self, rid: str) -> bool:
        """Forget a response this caller may see; False (a 404) if it may not, or is unknown."""
        if await self.load(rid) is None:
            return False
        return await self.state.delete_response(rid)

    def remember(self, item: StoredResponse, persist: bool) -> None:
        """Keep ``item`` for continuation; ``persist`` is the request's ``store`` flag."""
        if persist:
            self.put(item)


class ConnectionStore(ResponseStore):
    """A websocket connection's own recent responses (bounded LRU), then the shared store; the
    connection's caller is the shared view's (one key per connection)."""

    def __init__(self, shared: ResponseStore, capacity: int = 16) -> None:
        super().__init__(shared.state, lambda: shared.caller)
        self.shared = shared
        self.capacity = capacity
        self._items = ResponseCache(capacity)

    def get(self, rid: str) -> StoredResponse | None:
        return self._visible(self._items.get(rid)) or self.shared.get(rid)

    async def load(self, rid: str) -> StoredResponse | None:
        return self._visible(self._items.get(rid)) or await self.shared.load(rid)

    def forget(self, rid: str) -> None:
        """Drop a response from this connection's memory (the shared store keeps its own)."""
        self._items.pop(rid, None)

    def remember(self, item: StoredResponse, persist: bool) -> None:
        item.owner = self.caller.owner
        self._items.keep(item)  # kept for this connection even with store: false
        if persist:
            self.shared.put(item)
