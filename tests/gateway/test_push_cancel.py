"""Push mode (``gateway.pipeline.push``) when the turn's task is cancelled: the client left, a websocket
``response.cancel``, the watchdog.

A cancellation reaches the turn's task while it awaits push mode's future, and the task runs
again only at the loop's next turn. What must hold, each made to happen deterministically:

* no replica step in between calls the listener of a turn that is gone (it resolved the future
  a second time: ``InvalidStateError``, logged as ``stream listener failed`` 353 times in a
  soak, and, on a stream's last event, raised out of the replica's step and ended its task: the
  replica stopped stepping for good, silently);
* a send the replica handed over just before (a write that has to wait) is finished by the
  task with the cancellation thrown into it, never left half-driven.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from test_push import busy, started
from test_stream_interval import config

from fastmode.gateway.app import create_app


@pytest.fixture
async def app(tmp_path) -> AsyncIterator[Any]:
    app = create_app(config(1, tmp_path))
    async with app.router.lifespan_context(app):
        yield app


def listener_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "listener failed" in r.getMessage()
            or r.levelno >= logging.ERROR]


async def consume(turn: Any, push: Callable[[int, int], Coroutine[Any, Any, None]]) -> None:
    async for _ in turn.sse(push):
        pass


async def test_a_cancel_as_the_last_event_is_pushed_leaves_the_replica_stepping(
        app, caplog) -> None:
    """The client leaves (the turn's task is cancelled) in the very step that pushes the
    stream's last event: the replica's last call to the listener must not resolve the turn's
    future again. Before the fix this raised ``InvalidStateError`` out of the replica's step
    and its task ended: no step ever again, nothing logged."""
    turn = await started(app)
    stream = turn.job.stream
    replica = stream.replica
    enc = turn.encoder
    task: asyncio.Task[None] | None = None

    async def write(body: bytes) -> None:
        if stream.delivered >= stream.seq.output_tokens:
            assert task is not None
            task.cancel()  # the disconnect lands as the last event goes out

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        return write((lead or b"") + enc.sse_tokens(start, count))

    with caplog.at_level(logging.ERROR):
        task = asyncio.ensure_future(consume(turn, push))
        with pytest.raises(asyncio.CancelledError):
            await task
        steps = replica.steps
        assert replica.alive, "the replica's task ended"
        again = await started(app)  # the same replica serves the next request whole
        assert again.job.stream.replica is replica
        chunks = [c async for c in again.sse()]
    assert b"[DONE]" in chunks[-1] and replica.steps > steps
    assert not listener_failures(caplog)
    assert turn.job.settled and await busy(app) == 0


async def test_a_cancel_then_the_jobs_cancel_call_no_listener_twice(app, caplog) -> None:
    """What the websocket session does when its socket goes away mid-stream: cancel the turn's
    task, then settle (which cancels the job: the stream's listener gets its last call) in the
    same breath. The listener belongs to a turn that is gone: it must not be called (before the
    fix: ``stream listener failed``, ``InvalidStateError``, once per such cancel)."""
    turn = await started(app)
    stream = turn.job.stream
    enc = turn.encoder
    pushed = asyncio.Event()

    async def write(body: bytes) -> None:
        if stream.delivered >= 5:
            pushed.set()

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        return write((lead or b"") + enc.sse_tokens(start, count))

    with caplog.at_level(logging.ERROR):
        task = asyncio.ensure_future(consume(turn, push))
        await pushed.wait()
        task.cancel()  # the session's `stream.cancel()` ...
        turn.settle(499)  # ... and its `turn.settle(499)`, with no await in between
        turn.job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not listener_failures(caplog)
    assert turn.job.settled and await busy(app) == 0


async def test_a_cancel_after_a_waiting_send_was_handed_over_finishes_that_send(app) -> None:
    """The replica starts a write that has to wait (the socket is full) and hands it to the
    turn's task; the task is cancelled before it runs again (``call_soon`` from inside the
    write: it lands between ``done.set_result`` and the task's ``await rest``). The send must
    get the cancellation at its own await, as if the task had been driving it, and end there:
    not be dropped half-driven (before the fix: never resumed, closed whenever the garbage
    collector found it, with a "never awaited" warning)."""
    turn = await started(app)
    stream = turn.job.stream
    enc = turn.encoder
    loop = asyncio.get_running_loop()
    task: asyncio.Task[None] | None = None
    seen: list[str] = []

    async def write(body: bytes) -> None:
        if stream.delivered < 5:
            return  # written at once
        assert task is not None
        loop.call_soon(task.cancel)  # runs after this step, before the task resumes
        try:
            await loop.create_future()  # the socket is full: wait for it to drain
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        except GeneratorExit:
            seen.append("closed unfinished")
            raise

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        return write((lead or b"") + enc.sse_tokens(start, count))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = asyncio.ensure_future(consume(turn, push))
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["cancelled"]  # at once, before the task ended
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert seen == ["cancelled"]
    assert turn.job.settled and await busy(app) == 0
