"""Running the gateway app under uvicorn, one process or one worker: the same settings."""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

from ..config import Config
from ..limits import BoundedHttpTools
from ..shutdown import MARGIN_S, DrainingWebSocket, GatewayServer
from ..websocket import MAX_FRAME_BYTES


def serve(app: Any, config: Config, sockets: list[socket.socket], log_level: str,
          inner: Any = None) -> None:
    """Serve ``app`` on already-bound ``sockets`` until a signal stops it (graceful shutdown).
    ``inner`` is the gateway app when ``app`` wraps it (its ``state.shutdown`` drains)."""
    BoundedHttpTools.max_header_bytes = config.limits.max_header_bytes
    uv = uvicorn.Config(
        app,
        log_level=log_level,
        loop="uvloop",
        http=BoundedHttpTools,  # httptools with a bound on the request head (431)
        ws=DrainingWebSocket,  # websockets-sansio, closed by their sessions on shutdown
        ws_per_message_deflate=False,  # token frames are tiny: deflate only adds latency
        ws_max_size=MAX_FRAME_BYTES,  # larger frames are refused (close 1009), not buffered
        timeout_graceful_shutdown=int(config.server.shutdown_grace_s + MARGIN_S),
    )
    GatewayServer(uv, (inner or app).state.shutdown).run(sockets=sockets)
