"""The one write path's queue (fastmode/gateway/state/write_queue.py): creation order, a newer write of
an object replacing the older in place at the end, and an entry leaving only once a write that
held it succeeded (a newer one of the same key, made meanwhile, stays)."""

from __future__ import annotations

from typing import Any

from fastmode.gateway.state.write_queue import Entry, WriteQueue


def entry(key: str, item: Any) -> Entry:
    return Entry(key, item, lambda pipe: pipe.append((key, item)))


def test_pending_writes_keep_their_order_and_leave_only_once_written() -> None:
    q = WriteQueue()
    a, b, c = entry("obj:a", 1), entry("obj:b", 2), entry("resp:c", 3)
    for e in (a, b, c):
        q.put(e)
    assert [e.key for e in q.batch()] == ["obj:a", "obj:b", "resp:c"]
    assert q.get("obj:b") == 2 and q.get("obj:nope") is None
    sent = q.batch()  # a write in flight...
    newer = entry("obj:a", 10)
    q.put(newer)  # ... while the object changes: written after the others
    assert [e.key for e in q.batch()] == ["obj:b", "resp:c", "obj:a"]
    pipe: list[tuple[str, Any]] = []
    for e in sent:
        e.write(pipe)
    assert pipe == [("obj:a", 1), ("obj:b", 2), ("resp:c", 3)]
    q.landed(sent)  # the old state of a landed; its newer state has not
    assert len(q) == 1 and q.get("obj:a") == 10
    assert [e.key for e in q.entries("obj:")] == ["obj:a"] and list(q.entries("resp:")) == []
    assert q.discard("obj:a") and not q.discard("obj:a") and len(q) == 0
