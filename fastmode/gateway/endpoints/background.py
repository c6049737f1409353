"""Background mode of the Responses API (``background: true``): a turn that outlives its request.

``POST /v1/responses`` with ``background: true`` is checked, authenticated and admitted at once
(a bad request, a rate limit or an overload is answered then, as for any turn), and answered
with the response object in status ``queued``; the turn then runs on the tier's engine (or its
upstreams) detached from the client, through the one pipeline (``Turn.frames``: the same
events, settlement and ledger row as a streamed turn). Its status is what the engine says:
``queued`` while it waits for a batch slot, ``in_progress`` once it is scheduled, then
``completed`` (or ``incomplete``, ``failed``, ``cancelled``). The client polls
``GET /v1/responses/{id}`` (``gateway.endpoints.responses_api``) or cancels it with
``POST /v1/responses/{id}/cancel`` (billed for the tokens generated before the cancel).

The response is stored (a background response must be: ``store: false`` is a 400) and belongs
to the key that made it (``ResponseStore.seen_by``): another key gets a 404 on retrieve and on
cancel. The stored object follows the run (``queued`` at creation, ``in_progress`` at the first
token, the terminal object at the end), so every gateway process sharing the state answers a
poll; the process running it answers from the live run. With ``stream: true`` the create
request streams the run's events, and ``GET /v1/responses/{id}?stream=true&starting_after=N``
replays them from event ``N + 1`` and follows the run, on the process that runs it (the events
of its last ``KEEP_FINISHED`` finished runs stay replayable). A cancel that reaches another
process is passed on through the shared settings (``CANCELS``), which the running process reads
every ``flush_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse

from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.pipeline.turn import Turn
from fastmode.gateway.protocols.base import Protocol, RequestContext
from fastmode.gateway.protocols.events import Frames, sse_framed
from fastmode.gateway.protocols.openai_responses import ResponsesEncoder
from fastmode.gateway.stored.response_body import stored_body
from fastmode.gateway.stored.response_store import ResponseStore, StoredResponse

CANCELS = "background-cancel"  # settings namespace: cancels asked on another process
KEEP_FINISHED = 32  # finished runs kept in memory for replay (GET ?stream=true)
ACTIVE = ("queued", "in_progress")
CANCEL_WAIT_S = 5.0  # a cancel passed to another process waits this long for its answer
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


@dataclass(eq=False)
class Run:
    """One background response running (or recently finished) in this process."""

    turn: Turn
    rid: str
    req: Any
    store: ResponseStore
    events: Frames = field(default_factory=list)
    done: bool = False
    started: bool = False  # its first token went out (the stored object says in_progress)
    grew: asyncio.Event = field(default_factory=asyncio.Event)
    pump: asyncio.Task[None] | None = None
    task: asyncio.Task[None] | None = None

    def response(self) -> dict[str, Any]:
        """The response object now: from the engine's state while it runs, else the terminal
        event's."""
        if self.done:
            return _terminal(self.events) or self.object("failed")
        job = self.turn.job
        assert job is not None
        return self.object("queued" if job.stream.seq.admitted_at < 0 else "in_progress")

    def object(self, status: str) -> dict[str, Any]:
        enc = self.turn.encoder
        assert isinstance(enc, ResponsesEncoder)  # background mode is the Responses API's
        return enc.response(status)

    def keep(self, body: dict[str, Any]) -> None:
        """Store ``body`` as this response's object (the conversation is the request's)."""
        req, job = self.turn.request, self.turn.job
        assert job is not None
        self.store.put(StoredResponse(self.rid, job.model, req.messages, job.prompt_tokens,
                                      body=stored_body(body, self.req)))

    def _wake(self) -> None:
        self.grew.set()
        self.grew = asyncio.Event()

    async def events_after(self, after: int) -> AsyncIterator[bytes]:
        """The events after sequence number ``after`` as SSE, following the run to its end
        (event ``i`` has sequence number ``i``)."""
        sent = max(0, after + 1)
        while True:
            grew = self.grew
            if sent < len(self.events):
                batch = self.events[sent:]
                sent += len(batch)
                yield b"".join(sse_framed(batch, True))
            elif self.done:
                return
            else:
                await grew.wait()


def _terminal(events: Frames) -> dict[str, Any] | None:
    """The response object of the last event, if it ended the response."""
    if not events:
        return None
    body = orjson.loads(events[-1][1])
    resp = body.get("response")
    return resp if isinstance(resp, dict) and resp.get("status") not in ACTIVE else None


class Background:
    """The background runs of this process."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.runs: OrderedDict[str, Run] = OrderedDict()

    async def create(self, protocol: Protocol, req: Any, ctx: RequestContext,
                     request_id: str, started: float) -> Response:
        """Admit the turn now; answer ``queued`` (or stream its events) and run it detached."""
        if req.store is False:
            raise bad_request("Background mode requires 'store' to be true.", param="store")
        turn = Turn(self.gateway, protocol, req, ctx, request_id=request_id)
        job = await turn.start(stream=True)  # its events are recorded (replay, the stream)
        enc = turn.encoder
        assert enc is not None
        run = Run(turn, enc.rid, req, ctx.store)  # type: ignore[attr-defined]
        run.keep(run.object("queued"))
        self.runs[run.rid] = run
        run.task = asyncio.create_task(self._drive(run))
        headers = turn.headers(started)
        if req.stream:
            return StreamingResponse(run.events_after(-1), media_type="text/event-stream",
                                     headers={**SSE_HEADERS, **headers})
        body = run.object("queued" if job.stream.seq.admitted_at < 0 else "in_progress")
        return Response(orjson.dumps(body), 200, headers=headers,
                        media_type="application/json")

    async def _drive(self, run: Run) -> None:
        """Run the turn to its end (or to a cancel), then keep its terminal object."""
        turn, job = run.turn, run.turn.job
        assert job is not None
        run.pump = pump = asyncio.create_task(self._pump(run))
        settings, interval = self.gateway.state.settings, self.gateway.state.flush_interval_s
        while not pump.done():
            await asyncio.wait({pump}, timeout=interval)
            if not pump.done() and settings(CANCELS, run.rid):
                self._stop(run)  # a cancel asked on another process
        with contextlib.suppress(asyncio.CancelledError):
            await pump
        if pump.cancelled():
            turn.settle(499)  # billed for the tokens generated before the cancel
            assert turn.encoder is not None
            run.events += turn.encoder.cancelled()
        terminal = _terminal(run.events)
        if terminal is not None and terminal.get("status") != "completed":
            run.keep(terminal)  # (a completed one the protocol kept, with its reply)
        run.done = True
        run._wake()
        if settings(CANCELS, run.rid):
            await self.gateway.state.delete_settings(CANCELS, run.rid)
        self._retire()

    async def _pump(self, run: Run) -> None:
        job = run.turn.job
        assert job is not None
        async for frames in run.turn.frames():
            run.events += frames
            run._wake()
            if not run.started and job.delivered:
                run.started = True
                run.keep(run.object("in_progress"))  # what other processes see

    def _stop(self, run: Run) -> None:
        job = run.turn.job
        if job is not None and run.pump is not None and not run.pump.done():
            job.cancel()
            run.pump.cancel()

    def _retire(self) -> None:
        finished = [rid for rid, r in self.runs.items() if r.done]
        for rid in finished[:max(0, len(finished) - KEEP_FINISHED)]:
            del self.runs[rid]

    async def cancel(self, rid: str, stored: dict[str, Any]) -> dict[str, Any]:
        """Cancel a background response (idempotent: a finished one is answered as it is)."""
        if not stored.get("background"):
            raise bad_request("Only responses created with 'background' set to true can be "
                              "cancelled.", param="response_id")
        run = self.runs.get(rid)
        if run is not None:
            if not run.done:
                self._stop(run)
                assert run.task is not None
                await asyncio.shield(run.task)
            return run.response()
        if stored.get("status") not in ACTIVE:
            return stored
        # running on another process: ask it through the shared settings, then wait for it
        state = self.gateway.state
        await state.put_setting(CANCELS, rid, "cancel", time.time())
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            await asyncio.sleep(state.flush_interval_s)
            fresh = await state.reload_response(rid)
            body = fresh.body if fresh is not None else None
            resp = body.get("response") if isinstance(body, dict) else None
            if isinstance(resp, dict) and resp.get("status") not in ACTIVE:
                return resp
        raise APIError(504, f"Response '{rid}' did not stop within {CANCEL_WAIT_S:g} s.",
                       param="response_id", code="cancel_timeout", type="timeout_error")

    async def stop(self) -> None:
        """At shutdown (after the grace period ended every turn): nothing left behind."""
        tasks = [r.task for r in self.runs.values() if r.task is not None and not r.task.done()]
        for run in self.runs.values():
            self._stop(run)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
