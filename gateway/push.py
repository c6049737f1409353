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
(``gateway.turn``), where the lag bound and the watchdog apply as always.

Push mode is used for token events only, while no mid-stream fault is pending; the opening,
the closing, faults, errors and remote tiers (whose tokens arrive over the network) stay on the
turn's task. What is sent, and when, is the same either way: an event goes out at the step that
produced its last token.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backends.drivers.token_stream import TokenStream

    from .turn import Turn

Push = Callable[[int, int], Coroutine[Any, Any, None]]
"""The send of the events of tokens ``start .. start + count``, as a coroutine not yet started
(the events are encoded when it is made; the send runs when it is driven)."""


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


async def finish_send(sender: Generator[Any, Any, None], waiting: Any) -> None:
    """Drive a send that push mode started and that had to wait (``sender`` yielded
    ``waiting``), from the turn's task: wait for what it waits on, then resume it (an
    exception, a cancellation included, is thrown into it) until it is ``SENT``. What the send
    raises comes out as ``WriteFailed``."""
    try:
        while True:
            try:
                if waiting is None:
                    await asyncio.sleep(0)  # a bare yield
                else:
                    # the future was yielded to us, not to a task: take the hand-off a task
                    # takes (asyncio's Task.__step clears this flag) before waiting on it
                    waiting._asyncio_future_blocking = False
                    await waiting
            except BaseException as exc:
                waiting = sender.throw(exc)
            else:
                waiting = sender.send(None)
            if waiting is SENT:
                return
    except Exception as exc:
        raise WriteFailed(exc) from exc


async def pushing(turn: Turn, stream: TokenStream, push: Push, max_lag: float) -> bool:
    """Stream in push mode until it ends (all tokens sent, a write that waits, the stream
    cancelled or lagging); False if it could not start (the caller then waits for tokens).
    ``turn.abort`` is set if the stream fell ``max_lag`` behind; a write that raised is raised
    as ``WriteFailed``, anything else as itself."""
    loop = asyncio.get_running_loop()
    clock = loop.time
    done: asyncio.Future[Any] = loop.create_future()
    replica = stream.replica

    sender = new_sender()
    run = sender.send

    def due(start: int, n: int) -> bool:
        """The replica's call, inside its step: tokens ``start .. start + n`` were taken (0:
        the stream is over). Sent now, they are exactly on time unless the replica itself
        runs late: its lateness is the reader's lag. Not called again once it returned False
        (the stream drops its listener first)."""
        try:
            if n:
                if replica.late - turn.paused > max_lag:  # as in the turn's own loop
                    turn.lagged(replica.late - turn.paused, max_lag)
                    done.set_result(None)
                    return False
                send = push(start, n)  # (an encoder's failure raises here: the turn's own)
                try:
                    waiting = run(send)  # run it now: it returns while the socket takes
                except Exception as exc:  # the transport's error, for the transport
                    done.set_result(WriteFailed(exc))
                    return False
                if waiting is SENT:
                    return True
                done.set_result(finish_send(sender, waiting))  # the socket is full: the turn's
                return False  # task finishes this write
            done.set_result(None)  # the stream is over
            return False
        except Exception as exc:  # the turn's own failure (its encoder's): the turn ends it
            done.set_exception(exc)
            return False

    if not stream.listen(due):
        return False
    try:
        rest = await done
    finally:
        stream.listen(None)
    if isinstance(rest, WriteFailed):
        raise rest
    if rest is not None:
        turn.writing_since = clock()  # the watchdog cuts a write pending too long
        try:
            await rest  # raises WriteFailed as the send's own error
        finally:
            turn.writing_since = 0.0
    return True
