"""Running the gateway app under uvicorn, one process or one worker: the same settings."""

from __future__ import annotations

import logging
import socket
from typing import Any

import uvicorn
from uvicorn.config import LOG_LEVELS
from uvicorn.logging import DefaultFormatter

from fastmode.gateway.config import Config
from fastmode.gateway.edge.connections import GatewayHttp
from fastmode.gateway.edge.shutdown import MARGIN_S, DrainingWebSocket, GatewayServer
from fastmode.gateway.websocket import MAX_FRAME_BYTES


def request_log(log_level: str) -> None:
    """``fastmode.requests`` (a refused request's one line, ``gateway.observe.rejections``) on
    stderr at the server's level, formatted as uvicorn's lines: ``--log-level info`` shows each
    4xx under its access line."""
    logger = logging.getLogger("fastmode.requests")
    logger.setLevel(LOG_LEVELS.get(log_level.lower(), logging.WARNING))
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False  # (a root handler would print it twice)


def serve(app: Any, config: Config, sockets: list[socket.socket], log_level: str,
          inner: Any = None) -> None:
    """Serve ``app`` on already-bound ``sockets`` until a signal stops it (graceful shutdown).
    ``inner`` is the gateway app when ``app`` wraps it (its ``state.shutdown`` drains)."""
    server = config.server
    request_log(log_level)
    GatewayHttp.max_header_bytes = config.limits.max_header_bytes
    GatewayHttp.header_timeout_s = server.header_timeout_s
    GatewayHttp.max_connections = server.max_connections
    GatewayHttp.max_connections_per_client = server.max_connections_per_client
    uv = uvicorn.Config(
        app,
        log_level=log_level,
        # uvicorn formats each access line's arguments (the quoted path, the client) before
        # the logger filters it: ~10 us per request for nothing above "info"
        access_log=LOG_LEVELS.get(log_level.lower(), logging.INFO) <= logging.INFO,
        loop="uvloop",
        http=GatewayHttp,  # httptools with the head's bound and deadline, connection caps
        timeout_keep_alive=server.keep_alive_timeout_s,  # an idle keep-alive connection
        ws=DrainingWebSocket,  # websockets-sansio, closed by their sessions on shutdown
        ws_per_message_deflate=False,  # token frames are tiny: deflate only adds latency
        ws_max_size=MAX_FRAME_BYTES,  # larger frames are refused (close 1009), not buffered
        timeout_graceful_shutdown=int(server.shutdown_grace_s + MARGIN_S),
    )
    GatewayServer(uv, (inner or app).state.shutdown).run(sockets=sockets)
