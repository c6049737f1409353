"""Graceful shutdown on SIGTERM (and Ctrl-C): stop accepting, let streams finish, end the rest.

``fastmode serve`` runs uvicorn through ``GatewayServer``, whose signal handler calls
``Shutdown.begin`` before uvicorn's own shutdown starts. Then:

1. the gateway is *draining*: new requests are answered 503 ``server_shutting_down``, websocket
   sessions answer new ``response.create`` frames with an error event, and ``/readyz`` says
   503 — on new connections too: the listening sockets stay open until the turns have ended
   (``GatewayServer.shutdown``), so a load balancer sees 503, not a refused connection;
2. turns in flight (HTTP streams, non-streamed requests, websocket turns) may finish for
   ``server.shutdown_grace_s``;
3. those still running then end with the protocol's error event (``server_shutting_down``,
   503): the ``failed`` event of their encoder on SSE, an error event on the websocket, a 503
   body for a non-streamed request; they are billed for the tokens generated (ledger
   ``ended = shutdown``); websocket sessions close with 1001 once their turns have ended;
4. uvicorn's shutdown waits for the connections (its own timeout is the grace period plus a
   margin), then the app's lifespan stops the engines and flushes the ledger; exit status 0.

``DrainingWebSocket`` keeps uvicorn from closing open websockets at step 1 (it would send 1012
at once, with turns still running): the session closes them itself at step 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from fastmode.gateway.edge.connections import release
from fastmode.gateway.pipeline.admission import Gateway, shutting_down
from fastmode.gateway.state import SHUTDOWN

log = logging.getLogger("fastmode.shutdown")
MARGIN_S = 5.0  # uvicorn's own graceful timeout: our grace period plus this
GC_YOUNG_THRESHOLD = 25_000  # allocations between collections of the youngest generation (700)


class Shutdown:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.grace_s = gateway.config.server.shutdown_grace_s
        self.sessions: set[Any] = set()  # open websocket sessions (gateway.websocket.Session)
        self.task: asyncio.Task[None] | None = None
        self.ended = 0  # turns ended by the grace period

    def begin(self) -> None:
        if self.task is not None:
            return
        self.gateway.draining = True
        self.gateway.drain_event.set()
        log.warning("shutting down: %d turn(s) in flight get %.0f s to finish",
                    len(self.gateway.turns), self.grace_s)
        for session in list(self.sessions):
            session.draining()
        self.task = asyncio.get_running_loop().create_task(self._drain(), name="fastmode-drain")

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace_s
        while self.gateway.turns and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for turn in list(self.gateway.turns):
            turn.end_with(shutting_down(), 503, SHUTDOWN, "grace_period_over")
            self.ended += 1
        if self.ended:
            log.warning("shutdown: %d turn(s) ended at the end of the grace period", self.ended)
        while self.gateway.turns and loop.time() < deadline + MARGIN_S / 2:
            await asyncio.sleep(0.02)  # their error events go out
        for session in list(self.sessions):
            await session.close_for_shutdown()


class DrainingWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's websocket protocol, but an open socket is closed by its session (after its
    turns ended), not by uvicorn the moment shutdown begins."""

    def shutdown(self) -> None:
        if self.handshake_complete and not self.close_sent:
            return
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            release(self)  # the connection cap's count (gateway.connections), if counted
        finally:
            super().connection_lost(exc)


class GatewayServer(uvicorn.Server):
    """uvicorn's server, telling the app's ``Shutdown`` when a signal asks it to stop."""

    def __init__(self, config: uvicorn.Config, shutdown: Shutdown) -> None:
        super().__init__(config)
        self.drain = shutdown

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn re-raises a captured signal after its shutdown (so the process dies of it);
        a SIGTERM that drained the gateway is a normal exit instead: status 0."""
        with super().capture_signals():
            yield
            self._captured_signals = [s for s in self._captured_signals
                                      if s != signal.SIGTERM]

    async def startup(self, sockets: list[Any] | None = None) -> None:
        """uvicorn's start-up, then the heap built so far (config, profiles, schemas, the
        FastAPI app: what lives as long as the process) moved out of the cyclic GC's reach
        (``gc.freeze``): each collection of the oldest generation would walk it again,
        and a request allocates enough to set one off every few hundred requests. Then the
        youngest generation is collected every ``GC_YOUNG_THRESHOLD`` allocations instead of
        700: a finished request leaves no cycle (``tests/gateway/test_no_cycles.py``), so a
        collection finds only the live objects of the requests in flight. Collecting them 36
        times less often takes ~40,000 of the ~44,000 instructions the collector cost per
        short streamed request (callgrind); a collection of 25,000 young objects
        takes ~0.5 ms, inside the pacing tolerance (2 ms)."""
        await super().startup(sockets)
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        """uvicorn's shutdown begins by closing the listening sockets: a load balancer would
        then find ``/readyz`` unreachable rather than 503 for the whole drain. So the drain
        (step 2-3) runs first, with the sockets open: new connections are answered (503 to
        model requests, ``/readyz`` 503, ``/healthz`` 200) until the turns have ended."""
        self.drain.begin()
        task = self.drain.task
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), self.drain.grace_s + MARGIN_S)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon_threadsafe(self.drain.begin)
