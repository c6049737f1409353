"""Push mode: the engine's step writes a stream's token events, no task woken per event.

A reader that keeps up spends most of its cost per event not on its bytes but on being woken:
a future, a task step, a coroutine chain resumed, a wait re-armed. In push mode the turn
*listens* on its token stream (``backends.drivers.token_stream.TokenStream.listen``): the
replica takes the tokens inside the step that makes the next event due and hands them to the
turn, which encodes the event and gives it to the server's ``send`` right there. ``send`` is a
coroutine that does not wait while the socket takes the bytes (uvicorn writes to the transport
and returns), so it is run to its end on the spot, without a task. The first time a write
would wait (the client reads slower than the stream: the socket buffer is full) push mode ends:
the turn's own task finishes that write (``finish_send``) and goes back to waiting for tokens
(``gateway.pipeline.turn``), where the lag bound and the watchdog apply as always.

Push mode is used for token events only, while no mid-stream fault is pending; the opening,
the closing, faults, errors and remote tiers (whose tokens arrive over the network) stay on the
turn's task. What is sent, and when, is the same either way: an event goes out at the step that
produced its last token.

Cancellation (the client left, a websocket ``response.cancel``, the watchdog) reaches the turn's
task while it awaits ``pushing``'s future, and the task only runs again at the loop's next turn.
Two things are settled at the moment of the cancel, not then: the listener is removed in the
same call (``_Done.cancel``), so no replica step in between calls it for a turn that is gone
(it used to resolve the future a second time: an ``InvalidStateError`` inside the replica's
step, which once killed a replica's task); and a send the replica handed over just before (a
write that has to wait) is still finished by the task, with the cancellation thrown into it, as
if the cancel had come while the task drove it: no send is left half-driven.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from time import monotonic
from typing import Any, Protocol

from fastmode.backends.drivers.token_stream import TokenStream
from fastmode.gateway.observe.tracing import Trace


class Pusher(Protocol):
    """What push mode reads and sets of the turn it streams for (``gateway.pipeline.turn.Turn``; a
    protocol so that this module does not import the pipeline that imports it)."""

    request_id: str
    paused: float  # seconds an injected stall held the stream (not the reader's lag)
    writing_since: float  # loop time the pending write began (0: none): the watchdog reads it
    trace: Trace | None  # the request's ground truth, if traced (gateway.tracing)

    def lagged(self, lag: float, max_lag: float) -> None: ...

Push = Callable[[int, int, Any], Coroutine[Any, Any, None] | None]
"""The send of the events of tokens ``start .. start + count``, after ``lead`` (events the
transport sends first, in its own form, or None: Chat's role chunk goes with the first token),
as a coroutine not yet started (the events are encoded when it is made; the send runs when it
is driven), or None: the transport wrote them already (``gateway.edge.connections.DirectResponse``)."""

log = logging.getLogger("fastmode.turn")


class WriteFailed(Exception):
    """A pushed write raised: the turn re-raises ``error`` to its transport, as if its own
    write had raised it (an error of the turn itself, e.g. its encoder's, is not wrapped)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


SENT = object()
"""What ``_sender`` yields when a send it was handed has run to its end."""


@types.coroutine
def _sender() -> Generator[Any, Any, None]:
    """Runs each send coroutine handed to it (``.send(coro)``) to its end and yields ``SENT``;
    a send that has to wait yields what it waits on instead. Driving each send by hand
    (``coro.send(None)``) would end each in a ``StopIteration`` raised and caught; here it ends
    as an ``await`` does, without one (measured: 0.13 µs less per event)."""
    coro = yield SENT
    while True:
        yield from coro
        coro = yield SENT


def new_sender() -> Generator[Any, Any, None]:
    """A ``_sender`` ready to be handed sends."""
    sender = _sender()
    sender.send(None)
    return sender


def start_send(send: Coroutine[Any, Any, None]) -> tuple[Generator[Any, Any, None], Any]:
    """Run ``send`` as push mode does: (its sender, ``SENT`` if it ran to its end, else what
    it waits on, for ``finish_send``)."""
    sender = new_sender()
    return sender, sender.send(send)


async def finish_send(sender: Generator[Any, Any, None], waiting: Any,
                      error: BaseException | None = None) -> None:
    """Drive a send that push mode started and that had to wait (``sender`` yielded
    ``waiting``), from the turn's task: wait for what it waits on, then resume it (an
    exception, a cancellation included, is thrown into it, and the future it waited on is
    cancelled, as a task does) until it is ``SENT``. ``error``: thrown into it first (a
    cancellation that came before this task could drive it). What the send raises comes out
    as ``WriteFailed``."""
    try:
        while True:
            if error is not None:
                waiting, error = sender.throw(error), None
            else:
                try:
                    if waiting is None:
                        await asyncio.sleep(0)  # a bare yield
                    else:
                        # the future was yielded to us, not to a task, so it is marked as
                        # being awaited: wait on it through ``shield`` (its own future), not
                        # through its ``__await__``
                        await asyncio.shield(waiting)
                except BaseException as exc:
                    if waiting is not None and isinstance(exc, asyncio.CancelledError):
                        waiting.cancel()
                    waiting = sender.throw(exc)
                else:
                    waiting = sender.send(None)
            if waiting is SENT:
                return
    except Exception as exc:
        raise WriteFailed(exc) from exc


@dataclass(slots=True)
class _Pending:
    """A send the replica started and that has to wait: the turn's task finishes it."""

    sender: Generator[Any, Any, None]
    waiting: Any

    def abandon(self) -> None:
        """Nobody will drive it (its turn was cancelled from inside the send itself): the
        cancellation is thrown into it now, and it is closed if it goes on regardless."""
        try:
            self.sender.throw(asyncio.CancelledError())
        except BaseException:  # noqa: BLE001 - it ended, as a cancelled send does
            return
        self.sender.close()


class _Done(asyncio.Future[Any]):
    """What the turn's task awaits while the replica pushes. Cancelling it (the task is
    cancelled) stops the listening in the same call: see the module doc."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stream: TokenStream) -> None:
        super().__init__(loop=loop)
        self.stream = stream

    def cancel(self, msg: Any = None) -> bool:
        if not self.done():
            self.stream.listen(None)
        return super().cancel(msg)


async def _finish_handed_over(done: _Done, cancel: asyncio.CancelledError) -> None:
    """The turn's task was cancelled after the replica handed over a send that has to wait,
    before the task ran again: it still finishes that send, with the cancellation thrown into
    it (the caller then re-raises the cancellation)."""
    if done.done() and not done.cancelled() and done.exception() is None:
        pending = done.result()
        if isinstance(pending, _Pending):
            try:
                await finish_send(pending.sender, pending.waiting, cancel)
            except (asyncio.CancelledError, WriteFailed):
                pass  # the send ended; the cancellation goes on


async def pushing(turn: Pusher, stream: TokenStream, push: Push, max_lag: float,
                  lead: Any = None) -> tuple[bool, Any]:
    """Stream in push mode until it ends (all tokens sent, a write that waits, the stream
    cancelled or lagging): (True, ``lead`` if it is still to be sent), or (False, ``lead``)
    if it could not start (the caller then waits for tokens). ``lead``: events to send with
    the first tokens (Chat's role chunk), so push mode begins before the first token and the
    turn's task is not woken for it. ``turn.abort`` is set if the stream fell ``max_lag``
    behind; a write that raised is raised as ``WriteFailed``, anything else as itself."""
    replica = stream.replica
    loop = replica.loop  # the running loop (the replica's steps call ``due``), no pid check
    clock = loop.time
    done = _Done(loop, stream)
    trace = turn.trace

    sender = new_sender()
    run = sender.send

    def end(result: Any) -> bool:
        """Hand ``result`` to the turn's task; listening stops (False)."""
        if not done.done():
            done.set_result(result)
        elif isinstance(result, _Pending):  # the send itself cancelled its turn's task
            result.abandon()
        return False

    def due(start: int, n: int) -> bool:
        """The replica's call, inside its step: tokens ``start .. start + n`` were taken (0:
        the stream is over). Sent now, they are exactly on time unless the replica itself
        runs late: its lateness is the reader's lag. Not called again once it returned False
        (the stream drops its listener first), nor once the turn's task was cancelled."""
        try:
            if n:
                if replica.late - turn.paused > max_lag:  # as in the turn's own loop
                    turn.lagged(replica.late - turn.paused, max_lag)
                    return end(None)
                nonlocal lead
                first, lead = lead, None
                send = push(start, n, first)  # (an encoder's failure: the turn's own)
                if trace is not None:  # handed to the transport now, from the step
                    sent = monotonic()
                    if first is not None:
                        trace.event(None, sent, 0)
                    trace.event(stream.due_at(start, n), sent, n)
                if send is None:  # written to the transport already
                    return True
                try:
                    waiting = run(send)  # run it now: it returns while the socket takes
                except Exception as exc:  # the transport's error, for the transport
                    return end(WriteFailed(exc))
                if waiting is SENT:
                    return True
                # the socket is full: the turn's task finishes this write
                return end(_Pending(sender, waiting))
            return end(None)  # the stream is over
        except Exception as exc:  # the turn's own failure (its encoder's): the turn ends it
            if done.done():
                log.exception("turn %s failed while it was being cancelled", turn.request_id)
            else:
                done.set_exception(exc)
            return False

    if not stream.listen(due):
        return False, lead
    try:
        rest = await done
    except asyncio.CancelledError as cancel:
        await _finish_handed_over(done, cancel)
        raise
    finally:
        stream.listen(None)
    if isinstance(rest, WriteFailed):
        raise rest
    if rest is not None:
        turn.writing_since = clock()  # the watchdog cuts a write pending too long
        try:
            await finish_send(rest.sender, rest.waiting)  # raises WriteFailed: the send's own
        finally:
            turn.writing_since = 0.0
    return True, lead
