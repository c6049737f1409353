"""The one write path of a remote state store: what a client was told exists, until it is there.

Every stored kind the Redis backend keeps for a client (stored responses, and so their input
items; stored objects such as Chat Completions, ``gateway.state.objects``) is handed to one
``WriteQueue``, never written by a task of its own. The queue keeps each entry in memory, in the
order it was made, until a write that contained it succeeded; a writer sends every pending
entry in one pipeline, and what fails stays, to be written first when the store answers again
(the backend's probe then flushes). Meanwhile the process that holds an entry reads it from
here (``get``, ``entries``), so its owner sees it through an outage.

It is bounded: past ``cap`` pending entries, plus the ledger rows waiting with them, a new turn
is refused with a 503 (``room``) before any work, so nothing the client was told about is ever
dropped. Entries admitted before the cap was reached are all kept (the cap is checked at
admission, and a turn in flight always keeps what it makes).

Writes and deletes hold one lock: a delete never races a write that would bring the object
back.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# the default ``[state] pending_max``: entries (stored objects and ledger rows) kept in memory
# while the store is away; each is a few kB at most, so the default bounds it to tens of MB
PENDING_MAX = 10_000


@dataclass(eq=False)
class Entry:
    """One pending write: its key, the object (read back meanwhile) and how to write it."""

    key: str  # unique per stored object, e.g. "resp:resp_ab12"
    item: Any
    write: Callable[[Any], None]  # adds the write's commands to a (Redis) pipeline


class WriteQueue:
    """Pending writes in creation order, replaced in place by a newer write of the same key."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self.lock = asyncio.Lock()  # held by every write and delete (see the module docstring)

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, entry: Entry) -> None:
        self._entries.pop(entry.key, None)  # a newer state of the object: written after
        self._entries[entry.key] = entry

    def get(self, key: str) -> Any | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.item

    def entries(self, prefix: str = "") -> Iterator[Entry]:
        return (e for k, e in self._entries.items() if k.startswith(prefix))

    def batch(self) -> list[Entry]:
        """Every pending entry, oldest first (what the next write sends)."""
        return list(self._entries.values())

    def landed(self, written: list[Entry]) -> None:
        """A write of ``written`` succeeded: those entries leave (not a newer one of a key)."""
        for entry in written:
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]

    def discard(self, key: str) -> bool:
        """Forget a pending entry (its object was deleted); True if there was one."""
        return self._entries.pop(key, None) is not None
