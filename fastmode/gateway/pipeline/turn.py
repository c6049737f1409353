"""The turn pipeline: one request through admission, streaming, settlement and errors.

Every protocol (``gateway.protocols``) and both transports run the same code:

    body ─ limits ─ parse ─ validate ─ translate ─► TurnRequest ─ start ─► Job ─┬─ wait ─► body
                                                                              └─ frames ─► SSE / ws
    any APIError before the first byte ─► the protocol's error response (and a ledger row)
    any failure after it ─► the protocol's error event, logged; settlement exactly once

``Turn.start`` is where faults (``gateway.faults``) meet every protocol (status faults and
``timeout`` before admission, the mid-stream kinds in ``_events``). The watchdog and a graceful
shutdown find a turn in ``gateway.turns`` and end it with ``abort`` (the job cancelled, the
protocol's error event). ``gateway.edge.turn_http`` and ``gateway.websocket`` wrap it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from time import monotonic
from typing import Any

from fastmode.backends.drivers import TokenStream
from fastmode.gateway.cassettes.recorder import Tape
from fastmode.gateway.engines.tickets import ClientGone
from fastmode.gateway.errors import APIError
from fastmode.gateway.faults import STATUS_ANSWERS, STREAM_KINDS, Fault, Kind
from fastmode.gateway.observe.tracing import Trace
from fastmode.gateway.pipeline.admission import Gateway, shutting_down
from fastmode.gateway.pipeline.push import Push, WriteFailed, pushing
from fastmode.gateway.pipeline.turn_errors import (
    MALFORMED_BODY,
    MALFORMED_EVENT,
    drain,
    internal_error,
    lagging,
)
from fastmode.gateway.protocols.base import Encoder, Protocol, RequestContext
from fastmode.gateway.protocols.events import Frames
from fastmode.gateway.state import CUT, FAILED
from fastmode.gateway.stored.ledger import rejection_row
from fastmode.gateway.values.decision import Decision
from fastmode.gateway.values.ids import new_id
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest

log = logging.getLogger("fastmode.turn")


def _same(frames: Frames) -> Frames:
    return frames


class Turn:
    """One turn of one protocol, from a validated request to its last event."""

    def __init__(self, gateway: Gateway, protocol: Protocol, req: Any, ctx: RequestContext,
                 transport: str = "http", request_id: str | None = None,
                 arrived: float | None = None):
        self.gateway = gateway
        self.protocol = protocol
        self.req = req
        self.ctx = ctx
        self.transport = transport
        self.request_id = request_id or new_id("req")
        self.request: TurnRequest = protocol.translate(req, ctx)
        # ground truth of this request's timeline, if traced (gateway.tracing)
        self.trace: Trace | None = gateway.traces.begin(
            ctx.headers, self.request_id, protocol.name, transport, arrived)
        self.job: Job | None = None
        self.encoder: Encoder | None = None
        self.opened = False  # the opening events went out
        self.fault: Fault | None = None
        self.stream_fault: Fault | None = None  # a mid-stream fault still to apply
        self.decision: Decision | None = None  # what the request asked for, resolved once
        self.tier = ""  # the tier asked for, once resolved (for rejection rows)
        self.api_key = ""
        # (error, status, ended, detail): end the stream with this error (shutdown, lag)
        self.abort: tuple[APIError, int, str, str] | None = None
        self.cut = False  # drop the connection without a terminal event
        self.writer: asyncio.Task[Any] | None = None  # the task writing this turn's stream
        self.writing_since = 0.0  # loop time the pending write began (0: none pending)
        self.paused = 0.0  # seconds an injected stall held the stream (not the reader's lag)
        self.write_error: BaseException | None = None  # what a pushed write raised
        self.tape: Tape | None = None  # recording this turn (``--record``, gateway.cassettes)
        self.closing = False  # the closing events are the next (and last) thing yielded

    # -- admission ------------------------------------------------------------------------

    async def start(self, *, stream: bool | None = None,
                    disconnected: Callable[[], Awaitable[None]] | None = None) -> Job:
        """The decision (once), its fault, then admission on the tier's backend (the engine
        or a remote pool: one path, ``Gateway.admit``).

        Raises APIError (written to the ledger as a rejection) or ``ClientGone``."""
        gw, req = self.gateway, self.request
        try:
            self.decision = decision = gw.decide(req, self.ctx.headers,
                                                 self.protocol.vocabulary.param)
            self.tier = decision.tier.name
            self.api_key = decision.api_key
            gw.state.room()  # 503 while the writes waiting for the state store are at their cap
            if decision.fault is not None:
                await self._before_admission(decision, decision.fault, disconnected)
            if gw.cassettes is not None:  # record / replay: the request as matched, recorded
                gw.cassettes.before(self, stream)
            job = await gw.admit(req, decision, stream=stream, disconnected=disconnected)
        except APIError as exc:
            gw.record(rejection_row(
                self.request_id, req, exc, protocol=self.protocol.name,
                transport=self.transport, tier=self.tier or "", api_key=self.api_key,
                fault=self.fault.kind if self.fault else None))
            raise
        self.job = job
        self.encoder = self.protocol.encoder(job, self.req, self.request)
        if gw.cassettes is not None:  # a replayed job's recorded events; a tape to record
            self.encoder = gw.cassettes.after(self, job, self.encoder)
        job.protocol, job.transport = self.protocol.name, self.transport
        job.fault = self.fault.kind if self.fault else None
        gw.turns.add(self)
        if self.trace is not None:
            self.trace.admitted(job)
        return job

    async def _before_admission(self, decision: Decision, fault: Fault,
                                disconnected: Callable[[], Awaitable[None]] | None) -> None:
        gw = self.gateway
        kind = fault.kind
        if kind is Kind.FAST_EXHAUSTED and not decision.on_premium_pool:
            return  # not on a premium pool of its own: nothing to exhaust
        self.fault = fault
        gw.faults.injected(fault, self.tier, self.request_id)
        if kind in STATUS_ANSWERS:
            raise gw.faults.status_error(fault)
        if kind is Kind.TIMEOUT:
            await self._sleep(fault.seconds(gw.config.faults.timeout_s), disconnected)
        elif kind in STREAM_KINDS:
            self.stream_fault = fault

    async def _sleep(self, seconds: float,
                     disconnected: Callable[[], Awaitable[None]] | None) -> None:
        """One sleep (never per token); ``ClientGone`` if the client leaves meanwhile, a 503 if
        a graceful shutdown begins (it does not wait for an injected silence)."""
        drain = asyncio.ensure_future(self.gateway.drain_event.wait())
        watch = asyncio.ensure_future(disconnected()) if disconnected is not None else None
        try:
            done, _ = await asyncio.wait({drain} | ({watch} if watch else set()),
                                         timeout=seconds)
        finally:
            drain.cancel()
            if watch is not None:
                watch.cancel()
        if drain in done:
            raise shutting_down()
        if done:
            raise ClientGone()

    def headers(self, started: float) -> dict[str, str]:
        """The response headers of an admitted turn, the same for every protocol."""
        job = self.job
        assert job is not None
        h = {
            **self.protocol.id_headers(job.id),
            "x-fastmode-tier": job.tier.name,
            "openai-processing-ms": str(int((time.perf_counter() - started) * 1000)),
            **self.protocol.limit_headers(job.headers),
        }
        if job.downgraded:
            h["x-fastmode-requested-tier"] = job.requested_tier
        if self.fault is not None:
            h["x-fastmode-fault-injected"] = self.fault.kind
        return h

    # -- ending ---------------------------------------------------------------------------

    def settle(self, status: int, ended: str | None = None, detail: str | None = None) -> None:
        job = self.job
        assert job is not None
        if not job.settled:
            if self.trace is not None:
                self.trace.status = status
            if detail is not None:
                job.detail = detail
            self.gateway.settle(job, status, ended)
        self.gateway.turns.discard(self)

    def settle_aborted(self) -> None:
        """Settle as the abort (or a plain client cancel) says; a no-op once settled."""
        if self.abort is not None:
            _, status, ended, detail = self.abort
            self.settle(status, ended, detail)
        else:
            self.settle(499)

    def end_with(self, error: APIError, status: int, ended: str, detail: str) -> None:
        """End the turn early with ``error`` (shutdown, a lagging reader): the token loop stops
        at once and the stream closes with the protocol's error event."""
        if self.abort is None:
            self.abort = (error, status, ended, detail)
        if self.job is not None:
            self.job.cancel()

    def complete(self) -> None:
        """The job finished: settle it and let the protocol keep what it keeps."""
        job, enc = self.job, self.encoder
        assert job is not None and enc is not None
        self.settle(200)
        self.protocol.completed(job, self.req, enc, self.request, self.ctx)

    # -- streaming ------------------------------------------------------------------------

    def frames(self, push: Push | None = None) -> AsyncIterator[Frames]:
        """Opening events, token events as the engine produces them, closing events (the
        websocket sends each event as a frame). ``push``: the transport's way to send token
        events from inside the engine's step (``gateway.pipeline.push``), used when it can be."""
        enc = self.encoder
        assert enc is not None
        if self.tape is not None:  # recorded: every event through the frames (no push)
            return self.tape.frames(self._events(_same, enc.frame_tokens))
        return self._events(_same, enc.frame_tokens, push)

    def sse(self, push: Push | None = None) -> AsyncIterator[bytes]:
        """The same events as SSE bytes; token batches take the encoder's one-write path."""
        enc = self.encoder
        assert enc is not None
        if self.tape is not None:  # recorded: each event seen as a frame, then framed
            return self.tape.sse(self._events(_same, enc.frame_tokens))
        return self._events(enc.sse, enc.sse_tokens, push)

    def lagged(self, lag: float, max_lag: float) -> None:
        """The reader fell ``lag`` seconds behind the model: the stream ends (``abort``)."""
        self.abort = self.abort or (lagging(lag, max_lag), 499, CUT, "reader_lagging")

    async def _events(self, frame: Callable[[Frames], Any], tokens: Callable[[int, int], Any],
                      push: Push | None = None) -> AsyncIterator[Any]:
        """A failure mid-stream ends with the protocol's error event; settlement happens exactly
        once however the iteration ends (finished, failed, cut, or closed early by a client
        that went away). The reader's lag is checked once per batch (one compare, no timer):
        a batch whose first event was due longer than ``server.stream_max_lag_s`` ago ends the
        stream. This loop is the hot path: per batch of tokens (one event, or with
        ``stream_interval`` N one event of N tokens, when the reader keeps up) it does one
        compare, one encoder call and one yield; nothing here is per token (waits, the first
        batch, faults, the end: in methods of their own)."""
        job, enc = self.job, self.encoder
        assert job is not None and enc is not None
        stream = job.stream
        clock = self._clock()
        max_lag = self._max_lag()
        enc.interval = interval = stream.interval  # the tier's stream_interval
        trace = self.trace  # None unless traced: one compare per event (gateway.tracing)
        try:
            self.opened = True
            opening = frame(enc.opening())
            if enc.opening_at_first_token:  # sent when the first token is (Chat's role chunk)
                pending = opening
            else:
                pending = None
                self._mark(None, 0)
                yield opening
            take = stream.take
            # a remote tier's stream is not pushed: its tokens come over the network
            engine = stream if isinstance(stream, TokenStream) else None
            while True:  # the engine's token stream itself, no iterator layer in between
                n = take()
                if not n:
                    going, pending = await self._idle(engine, push, max_lag, pending)
                    if not going:
                        break
                    continue
                start = stream.delivered - n
                now = clock()
                # `since` bounds the due time: the exact lag only when it may be over
                if now - stream.since - self.paused > max_lag and self._behind(
                        start, n, now, max_lag):
                    break
                fault = self.stream_fault
                whole = fault is None or start + n < fault.after  # no fault inside this batch
                if pending is not None:
                    if whole:  # one write with the tokens
                        yield self._first(pending, tokens, start, n)
                        pending = None
                        continue
                    self._mark(None, 0)
                    yield pending
                    pending = None
                if whole:
                    if trace is not None:
                        trace.event(stream.due_at(start, n), monotonic(), n)
                    yield tokens(start, n)
                    continue
                assert fault is not None
                # the fault goes after the event holding its token (events stay whole)
                head = max(0, min(n, -(-fault.after // interval) * interval - start))
                if head:
                    self._mark(start, head)
                    yield tokens(start, head)
                async for out in self._apply(fault, frame):
                    yield out
                if self.cut or job.settled:
                    return
                if n > head:
                    self._mark(start + head, n - head)
                    yield tokens(start + head, n - head)
            async for out in self._ending(frame, pending):
                yield out
        except asyncio.CancelledError:
            self._as_sent()  # a cancelled websocket turn answers with the partial output
            raise
        except WriteFailed as failed:  # a pushed write: the transport's own error
            self.write_error = failed.error
            raise failed.error from None
        except Exception as exc:
            log.exception("turn %s failed while streaming", job.id)
            self.settle(500, FAILED, "internal_error")
            # an APIError (e.g. a remote engine that broke off) says what happened itself
            error = exc if isinstance(exc, APIError) else internal_error(exc)
            yield frame(self._as_sent().failed(error))
        finally:
            self.settle_aborted()  # a no-op unless the consumer stopped early
            if trace is not None:
                self.gateway.traces.keep(trace)

    def _max_lag(self) -> float:
        """``server.stream_max_lag_s`` (wall seconds) on the stream's clock (modeled seconds)."""
        stream = self.job.stream if self.job is not None else None
        scale = stream.replica.scale if isinstance(stream, TokenStream) else 1.0
        return self.gateway.config.server.stream_max_lag_s / scale

    def _mark(self, start: int | None, n: int) -> None:
        """Trace an event sent now: ``n`` tokens from ``start``, or (None, 0) none."""
        trace, job = self.trace, self.job
        if trace is None or job is None:
            return
        if start is None:
            trace.event(None, monotonic(), 0)
        else:
            trace.event(job.stream.due_at(start, n), monotonic(), n)

    def _first(self, pending: Any, tokens: Callable[[int, int], Any], start: int, n: int) -> Any:
        """The held opening and the first batch of tokens, as one write."""
        trace, job = self.trace, self.job
        if trace is not None and job is not None:
            sent = monotonic()
            trace.event(None, sent, 0)
            trace.event(job.stream.due_at(start, n), sent, n)
        return pending + tokens(start, n)

    def _behind(self, start: int, n: int, now: float, max_lag: float) -> bool:
        """The batch ``start .. start + n`` was due over ``max_lag`` ago: the stream ends."""
        assert self.job is not None
        lag = now - self.job.stream.due_at(start, n) - self.paused
        if lag > max_lag:
            self.lagged(lag, max_lag)
            return True
        return False

    async def _idle(self, engine: TokenStream | None, push: Push | None, max_lag: float,
                    pending: Any) -> tuple[bool, Any]:
        """No tokens are due: push mode if it can be (an engine's stream, no fault pending, not
        ending), else wait. (False, ...) once over or ending; ``pending``: the opening unsent."""
        if (push is not None and engine is not None and self.stream_fault is None
                and self.abort is None):
            pushed, pending = await pushing(self, engine, push, max_lag, pending)
            if pushed:  # push mode ended: look at the stream again, unless it is ending
                return self.abort is None, pending
        assert self.job is not None
        waiter = self.job.stream.ready()
        if waiter is None:
            return False, pending
        await waiter
        return True, pending

    async def _ending(self, frame: Callable[[Frames], Any], pending: Any) -> AsyncIterator[Any]:
        """After the last token: the opening if unsent, then the abort's error, a fault after the
        reply's last token, or the closing events."""
        job, enc = self.job, self.encoder
        assert job is not None and enc is not None
        if pending is not None:  # no token came (an empty reply, or a cut)
            self._mark(None, 0)
            yield pending
        job.streamed()
        if self.abort is not None and not job.finished:
            yield frame(self._as_sent().failed(self.abort[0]))
            self.settle_aborted()
            return
        if self.stream_fault is not None:  # asked for after the reply's last token
            async for out in self._apply(self.stream_fault, frame):
                yield out
            if self.cut or job.settled:
                return
        self.complete()
        self.closing = True  # the last events: the transport may end the body with them
        self._mark(None, 0)
        yield frame(enc.closing())

    def _as_sent(self) -> Encoder:
        """The encoder in the state of what was sent: one that encoded ahead of the stream is
        rebuilt and replayed up to the tokens sent, so an early end (``failed``, ``cancelled``)
        carries the output and sequence numbers the client saw. Never on the hot path."""
        enc, job = self.encoder, self.job
        assert enc is not None and job is not None
        sent = enc.ran_ahead()
        if sent is None:
            return enc
        try:
            fresh = self.protocol.encoder(job, self.req, self.request)
            fresh.interval = enc.interval
            fresh.opening()
            if sent:
                fresh.tokens(0, sent)  # as sent: every batch ended on an event boundary
        except Exception:  # a broken encoder: its error event from the state it has
            log.exception("turn %s: replaying the encoder failed", job.id)
            return enc
        self.encoder = fresh
        return fresh

    def _clock(self) -> Callable[[], float]:
        """The stream's clock: the engine's (modeled, scaled), or the loop's (a remote tier)."""
        stream = self.job.stream if self.job is not None else None
        if isinstance(stream, TokenStream):
            return stream.replica.clock
        return asyncio.get_running_loop().time

    async def _apply(self, fault: Fault, frame: Callable[[Frames], Any]) -> AsyncIterator[Any]:
        """Apply a mid-stream fault once (its tokens so far have been sent)."""
        self.stream_fault = None
        enc = self.encoder
        assert enc is not None
        if fault.kind is Kind.STALL:  # one sleep, cut short by a graceful shutdown
            clock = self._clock()
            began = clock()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gateway.drain_event.wait(),
                                       fault.seconds(self.gateway.config.faults.stall_s))
            self.paused += clock() - began  # the server's own pause is not the reader's lag
        elif fault.kind is Kind.MALFORMED:
            yield frame([(MALFORMED_EVENT.get(self.protocol.name, ""), MALFORMED_BODY)])
        elif fault.kind is Kind.CUT:
            self.cut = True
            self.settle(499, CUT, "fault")
        elif fault.kind is Kind.ERROR_EVENT:
            yield frame(self._as_sent().failed(self.gateway.faults.stream_error(fault)))
            self.settle(500, FAILED, "fault")

    async def wait(self, disconnected: Callable[[], Awaitable[None]]) -> bool:
        """Drain the job's tokens; False if ``disconnected`` returned first (job cancelled)."""
        assert self.job is not None
        return await drain(self.job, disconnected)
