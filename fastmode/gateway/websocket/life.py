"""What bounds a websocket connection's life: connection caps, age, idleness, shutdown.

A mixin of ``Session`` (``session.py``): the per-connection timers here are one sleep per
period (age, idle), never a timer per frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from fastmode.gateway.edge.shutdown import Shutdown
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.pipeline.admission import Gateway, shutting_down

if TYPE_CHECKING:
    from starlette.websockets import WebSocket

AGE_GRACE_S = 30.0  # at the age limit, running turns get this long to finish
CLOSE_GOING_AWAY = 1001  # the SDK treats 1001 as recoverable and may reconnect
LIMIT_CODE = "websocket_connection_limit_reached"


class ConnectionLife:
    ws: WebSocket
    gateway: Gateway
    shutdown: Shutdown | None
    key: str
    lanes: dict[Any, Any]
    closing: bool
    max_age: float
    last_frame: float
    stopping: APIError | None

    def _over_cap(self) -> APIError | None:
        """The server-wide and per-key caps on open connections (``server.ws_max_*``)."""
        server = self.gateway.config.server
        if self.gateway.draining:
            return shutting_down()
        open_ = self.shutdown.sessions if self.shutdown is not None else set()
        if len(open_) >= server.ws_max_connections:
            return APIError(429, f"Too many open websocket connections (at most "
                            f"{server.ws_max_connections}).", code=LIMIT_CODE, type="requests",
                            headers={"retry-after": "1"})
        mine = sum(1 for s in open_ if s.key == self.key)
        if mine >= server.ws_max_connections_per_key:
            return APIError(429, f"Too many open websocket connections for this API key (at "
                            f"most {server.ws_max_connections_per_key}).", code=LIMIT_CODE,
                            type="requests", headers={"retry-after": "1"})
        return None

    async def _age_limit(self) -> None:
        await asyncio.sleep(self.max_age)
        self.closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + AGE_GRACE_S
        while self.lanes and loop.time() < deadline:
            await asyncio.sleep(0.02)
        with contextlib.suppress(Exception):
            await self.ws.close(
                CLOSE_GOING_AWAY,
                f"max connection age ({self.max_age:g} s) reached; open a new connection",
            )

    async def _idle_limit(self) -> None:
        """Close a connection with no frame and no turn for ``server.ws_idle_timeout_s``
        (one sleep per idle period, never a timer per frame)."""
        idle = self.gateway.config.server.ws_idle_timeout_s
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.01, self.last_frame + idle - loop.time()))
            if self.lanes:
                self.last_frame = loop.time()  # a turn is running: not idle
            elif loop.time() - self.last_frame >= idle:
                with contextlib.suppress(Exception):
                    await self.ws.close(CLOSE_GOING_AWAY, f"idle for {idle:g} s")
                return

    def draining(self) -> None:
        """Shutdown began: refuse new turns (running ones get the grace period)."""
        self.stopping = shutting_down()

    async def close_for_shutdown(self) -> None:
        """After the grace period: running turns have been ended; close with 1001."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2.0
        while self.lanes and loop.time() < deadline:
            await asyncio.sleep(0.02)
        with contextlib.suppress(Exception):
            await self.ws.close(CLOSE_GOING_AWAY, "server shutting down")



def limit_error(max_age: float) -> APIError:
    return bad_request(
        f"This connection reached its maximum age ({max_age:g} s) and is closing; open a new "
        "connection.", code=LIMIT_CODE,
    )
