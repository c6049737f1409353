"""Values remembered per caller: the work a request repeats from its caller's last one, done once.

A coding agent sends its whole conversation again at every turn, with the same tool definitions:
its long texts are counted (``backends.tokenizer``) and its tool schemas checked
(``gateway.http.limits``) once, and looked up after. Entries are kept under (scope, key): the
scope is the caller's credentials, so no caller's lookup can hit what another sent (a hit is
faster than the work, and a caller must not be able to time whether another sent a text). The
store is bounded by the total length of its keys, least recently used first out, and shared by
the event loop and the threads that translate large bodies, so each change holds a lock.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    def __init__(self, max_size: int) -> None:
        self.max_size = max_size  # characters (or bytes) of the keys kept, in all
        self.size = 0
        self.entries: dict[tuple[str, str | bytes], V] = {}
        self._lock = threading.Lock()

    def get(self, scope: str, key: str | bytes) -> V | None:
        with self._lock:
            value = self.entries.pop((scope, key), None)
            if value is not None:
                self.entries[(scope, key)] = value  # now the most recently used
            return value

    def put(self, scope: str, key: str | bytes, value: V) -> None:
        if len(key) > self.max_size:
            return
        with self._lock:
            if (scope, key) in self.entries:  # a new value (a check under other limits)
                self.entries[(scope, key)] = value
                return
            self.entries[(scope, key)] = value
            self.size += len(key)
            while self.size > self.max_size:
                oldest = next(iter(self.entries))
                del self.entries[oldest]
                self.size -= len(oldest[1])
