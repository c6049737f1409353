"""An upstream's answer as a ``Job``: the turn pipeline runs remote turns unchanged.

``UpstreamStream`` stands where an in-process job has the engine's ``TokenStream``: an async
iterator of token counts, one per read from the upstream, whose ``seq`` carries the state
and times that settlement and ``time_info`` read. So ``Turn`` (admission aside), the protocol
encoders, cancellation and settlement are the same code for both kinds of tier: usage and cost
are counted once, by the same settlement, whichever tier served.

Times are the gateway's clock (``loop.time()``) when each read from the upstream arrived: what
the gateway saw, the hop included. ``time_info`` prefers the engine's own modeled times when it sent them.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from fastmode.backends.drivers.token_stream import CountStream
from fastmode.backends.scheduler import CANCELLED, DECODE, FINISHED, WAITING
from fastmode.gateway.remote.http import Response, UpstreamError
from fastmode.gateway.remote.translate import ChunkReader, LiveReply, UpstreamFailed, usage_counts
from fastmode.gateway.values.job import Job


class UpstreamSeq:
    """The parts of an engine ``Sequence`` that jobs read: state and times (loop clock)."""

    __slots__ = ("state", "arrival", "admitted_at", "first_token_at", "finished_at", "first_step")

    def __init__(self, arrival: float) -> None:
        self.state = WAITING
        self.first_step = -1  # no engine step here: settlement bills what was delivered
        self.arrival = arrival
        self.admitted_at = arrival
        self.first_token_at = -1.0
        self.finished_at = -1.0


def _ended(outcome: str, exc: UpstreamError | None) -> None:
    """What a stream's ``on_end`` becomes once it ran (it runs exactly once)."""


class UpstreamStream(CountStream):
    """Token counts of an upstream's reply as it arrives; ``cancel`` closes the connection.

    Speaks the engine ``TokenStream``'s protocol: each item is how many pieces are new,
    ``delivered`` counts them, ``last_at`` / ``token_at`` / ``due_at`` give their arrival
    times (one mark per read, so O(1) per item, never per token). ``on_end(outcome, error)``
    runs exactly once when the stream ends (``ok``, ``failed`` or ``cancelled``): it returns
    the upstream's slot in the pool and counts the attempt."""

    __slots__ = ("seq", "reply", "reader", "response", "chunks", "delivered", "since", "tag",
                 "_ready", "_marks", "_on_end", "_loop", "_ended")
    interval = 1  # one event per read: an upstream's own pacing
    watched_at = -1.0  # no reasoning tokens come from an upstream's Chat stream

    def __init__(self, reply: LiveReply, response: Response | None,
                 on_end: Callable[[str, UpstreamError | None], None], arrival: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.seq = UpstreamSeq(arrival)
        self.reply = reply
        self.reader = ChunkReader(reply)
        self.response = response
        self.chunks: AsyncIterator[bytes] | None = None
        self.delivered = 0
        self.since = 0.0  # a lower bound of due_at (none kept here: the lag check is exact)
        self.tag: Any = None
        self._ready = 0  # pieces received, not yet handed out
        self._marks: list[tuple[int, float]] = []  # (pieces received so far, arrival time)
        self._on_end = on_end
        self._ended = False

    # -- set up by the proxy ----------------------------------------------------------------

    def opened(self, first: bytes, chunks: AsyncIterator[bytes]) -> None:
        """A streamed answer: its first bytes (already read, to be sure it started) and the
        rest to come."""
        self.chunks = chunks
        self._take(self.reader.feed(first))
        if self.reader.done:
            self._finished()

    def complete(self, now: float) -> None:
        """A whole (non-streamed) answer: every piece arrives at once."""
        if not self.reply.pieces:  # an empty reply still ends with one (empty) token
            self.reply.add_text("")
        self._take(len(self.reply.pieces), now)
        self.seq.state = FINISHED
        self.seq.finished_at = now
        self._end("ok")

    # -- the token stream -------------------------------------------------------------------

    def take(self) -> int:
        """Hand out the pieces received since the last call (0 if none)."""
        n, self._ready = self._ready, 0
        self.delivered += n
        return n

    def ready(self) -> Awaitable[None] | None:
        """What to await for more pieces (one read of the upstream), or None when it ended."""
        if self.seq.state in (FINISHED, CANCELLED) or self.chunks is None:
            return None
        return self._read()

    async def _read(self) -> None:
        assert self.chunks is not None
        try:
            data = await self.chunks.__anext__()
        except StopAsyncIteration:
            self._fail(None, "the upstream ended the stream before [DONE]")
        except UpstreamError as exc:
            if self.seq.state == CANCELLED:
                return  # ``ready`` then says the stream is over
            self._fail(exc, str(exc))
        try:
            self._take(self.reader.feed(data))
        except UpstreamFailed:
            self._end("failed")
            raise
        if self.reader.done:
            await self._drain()
            self._finished()

    def _take(self, n: int, now: float | None = None) -> None:
        if n:
            now = self._loop.time() if now is None else now
            if self.seq.first_token_at < 0:
                self.seq.first_token_at = now
                self.seq.state = DECODE
            self._ready += n
            self._marks.append((self.delivered + self._ready, now))

    @property
    def last_at(self) -> float:
        return self.token_at(self.delivered - 1) if self.delivered else -1.0

    def token_at(self, k: int) -> float:
        """Arrival time of piece ``k`` (the read that brought it)."""
        i = bisect.bisect_right(self._marks, k, key=lambda m: m[0] - 1)
        return self._marks[min(i, len(self._marks) - 1)][1]

    def due_at(self, start: int, count: int) -> float:
        return self.token_at(start)

    def produced(self) -> int:
        """What arrived is what was produced (the upstream bills the rest itself)."""
        return self.delivered + self._ready

    def host_lag(self) -> tuple[float, float]:
        """The times here are observed, not modeled: nothing to tell apart (an upstream
        fastmode engine reports its own ``host_lag_time``)."""
        return 0.0, 0.0

    async def _drain(self) -> None:
        """After [DONE]: read the end of the HTTP message so the connection can be reused."""
        assert self.chunks is not None
        try:
            async for _ in self.chunks:
                pass
        except UpstreamError:
            pass

    def _finished(self) -> None:
        self.seq.state = FINISHED
        self.seq.finished_at = self._loop.time()
        if not self.reply.pieces:  # an empty reply still ends with one (empty) token
            self.reply.add_text("")
            self._take(1)
        self._end("ok")

    def _fail(self, exc: UpstreamError | None, why: str) -> NoReturn:
        timeout = type(exc).__name__ == "ReadTimeout"
        self._end("failed", exc)
        raise UpstreamFailed(
            "The upstream server " + ("went silent" if timeout else "failed") + " in the middle "
            f"of the response ({why}); the response is incomplete.",
            "upstream_timeout" if timeout else "upstream_disconnected")

    def _end(self, outcome: str, exc: UpstreamError | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if self.response is not None:
            self.response.close()  # back to the pool if the message ended, else closed
        on_end, self._on_end = self._on_end, _ended
        on_end(outcome, exc)  # (dropped: it holds the job, which holds this stream: a cycle)

    def cancel(self) -> None:
        if self.seq.state not in (FINISHED, CANCELLED):
            self.seq.state = CANCELLED
            self._end("cancelled")

    async def aclose(self) -> None:
        self.cancel()


@dataclass(eq=False)
class RemoteJob(Job):
    """A job served by an upstream engine. ``gen`` is a ``LiveReply``; usage comes from the
    upstream's report (its prompt count and cached tokens are the engine's; the prompt count
    is the gateway's own where the upstream saw a translation, ``own_count``), priced here."""

    upstream: UpstreamStream | None = None  # the same object as ``stream``, typed
    upstream_time_info: dict[str, Any] | None = None
    own_count: bool = False  # keep ``prompt_tokens`` (``TurnRequest.own_count``)

    def take_usage(self, usage: dict[str, Any] | None, time_info: dict[str, Any] | None) -> None:
        if usage is not None:
            prompt, cached = usage_counts(usage)
            if prompt and self.own_count:  # the cached prefix is the engine's, within ours
                self.cached_tokens = min(cached, self.prompt_tokens)
            elif prompt:
                self.prompt_tokens, self.cached_tokens = prompt, cached
        if time_info is not None:
            self.upstream_time_info = time_info

    def streamed(self) -> None:
        if self.upstream is not None:
            self.take_usage(self.upstream.reader.usage, self.upstream.reader.time_info)

    def time_info(self) -> dict[str, float]:
        """The engine's modeled times when it sent them (plus the emulated network time), else
        what the gateway observed."""
        ti = self.upstream_time_info
        if not ti:
            return super().time_info()
        out = {k: float(v) for k, v in ti.items() if isinstance(v, (int, float))}
        out["queue_time"] = out.get("queue_time", 0.0) + self.network_s
        out["total_time"] = out.get("total_time", 0.0) + self.network_s
        out["network_time"] = self.network_s
        out.pop("created", None)  # an older engine's: the response carries its own
        return out
