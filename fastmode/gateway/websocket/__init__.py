"""Responses API WebSocket mode: a persistent socket at ``/v1/responses`` and ``/fast/v1/responses``.

One JSON event per text frame. The client sends ``{"type": "response.create", ...the create
body...}`` and receives the same events as the SSE stream (the Responses protocol's
encoder), ending with ``response.completed`` / ``response.incomplete`` or an
``error`` event. See docs/websocket.md for the protocol as fastmode implements it:

* turns on one lane (``stream_id``, default: none) run one at a time, in order (FIFO, as the
  SDK documents); up to ``MAX_LANES`` lanes run concurrently; ``MAX_PENDING`` creates may wait;
* ``previous_response_id`` continues one of the connection's recent responses (kept in memory
  even with ``store: false``) or a stored one: the earlier context is cached input;
* ``{"type": "response.cancel"}`` (optional ``stream_id`` / ``response_id``) or closing the
  socket cancels the running response: its batch slot is free at the engine's next step and
  it is billed for the tokens sent;
* bad frames get an ``error`` event and the socket stays open; frames over ``MAX_FRAME_BYTES``
  are refused by the server (close 1009) before they are buffered;
* after ``server.max_connection_age_s`` the server lets running turns finish (at most
  ``AGE_GRACE_S``) and closes with 1001 and a reason;
* at most ``server.ws_max_connections`` sockets are open (``ws_max_connections_per_key`` per
  API key): past that the upgrade is refused with 429 ``websocket_connection_limit_reached``; a
  socket with no frame and no turn for ``server.ws_idle_timeout_s`` is closed with 1001;
* on a graceful shutdown, new turns get an ``error`` event (503) and running ones the grace
  period, then their ``response.failed`` event, then the socket closes with 1001;
* with ``--emulate-rtt-ms``, opening the socket costs TCP + TLS + upgrade and each turn one RTT
  (``gateway.http.netem``).
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.websockets import WebSocket

from fastmode.gateway.http.netem import NetworkModel
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.websocket.session import MAX_FRAME_BYTES, Session

__all__ = ["MAX_FRAME_BYTES", "Session", "add_routes"]


def add_routes(app: FastAPI, gateway: Gateway, network: NetworkModel | None = None) -> None:
    net = network or NetworkModel()
    for prefix, fast in (("/v1", False), ("/fast/v1", True)):

        async def responses_ws(websocket: WebSocket, fast: bool = fast) -> None:
            state = websocket.app.state
            await Session(websocket, gateway, state.responses, fast, net,
                          getattr(state, "shutdown", None)).serve()

        app.router.add_websocket_route(prefix + "/responses", responses_ws)
