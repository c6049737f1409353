"""Network emulation: the round trips a client on a real network pays before its first token.

On loopback a TCP + TLS handshake costs microseconds, so the benefit of a persistent websocket
is invisible. With ``--emulate-rtt-ms R`` (config ``server.emulate_rtt_ms``) the gateway charges
the modeled network time of each request before admitting it to the engine: one
``asyncio.sleep`` per request (never per token), so the engine's timeline and every TTFT the
client measures shift by exactly that amount. The time is reported as
``time_info.network_time`` (and included in ``queue_time``/``total_time``, and in the TTFT
histogram).

The model (pure functions of the RTT, tested on a virtual clock):

* a fresh HTTPS request: TCP handshake (1 RTT) + TLS 1.3 full handshake (1 RTT) + the request
  and the first byte of its answer (1 RTT) = 3 RTT; a request body larger than the initial
  congestion window (10 segments, RFC 6928) needs extra round trips of TCP slow start;
* a request on a kept-alive HTTP connection: 1 RTT;
* opening a websocket: TCP + TLS + the upgrade request = 3 RTT, paid once at connect;
* a turn on an open websocket: 1 RTT (the ``response.create`` frame out, the first event back)
  and nothing more.

A connection is "kept alive" when its (host, port) pair sent a request before and has not been
idle longer than the server's keep-alive timeout (uvicorn closes idle connections after 5 s).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

MSS_BYTES = 1460  # TCP payload per segment on a 1500-byte MTU path
INIT_CWND_SEGMENTS = 10  # Linux's initial congestion window (RFC 6928)
KEEPALIVE_IDLE_S = 5.0  # uvicorn's timeout_keep_alive default: idle connections close after it
TRACKED_CONNECTIONS = 65536  # bound of the (host, port) table

# The modeled network time of the request being handled (read by Gateway.admit into
# job.network_s). Set by the HTTP middleware and by each websocket turn.
network_time: ContextVar[float] = ContextVar("fastmode_network_time", default=0.0)


@dataclass(frozen=True)
class NetworkModel:
    """Round trips before the first token, per way of reaching the gateway."""

    rtt_s: float = 0.0
    tcp_rtts: float = 1.0  # SYN / SYN-ACK; the ACK rides with the first data
    tls_rtts: float = 1.0  # TLS 1.3 full handshake (TLS 1.2 would be 2)
    init_cwnd_bytes: int = INIT_CWND_SEGMENTS * MSS_BYTES
    time_scale: float = 1.0  # wall seconds per modeled second (``server.time_scale``)

    @classmethod
    def from_ms(cls, rtt_ms: float, time_scale: float = 1.0) -> NetworkModel:
        return cls(rtt_s=max(0.0, rtt_ms) / 1000.0, time_scale=time_scale)

    def wall(self, modeled_s: float) -> float:
        """The wall time a modeled delay is slept for (the times reported stay modeled)."""
        return modeled_s * self.time_scale

    @property
    def enabled(self) -> bool:
        return self.rtt_s > 0

    def handshake_s(self) -> float:
        """TCP + TLS before the first request byte can leave the client."""
        return (self.tcp_rtts + self.tls_rtts) * self.rtt_s

    def slow_start_rtts(self, nbytes: int) -> int:
        """Extra round trips to upload ``nbytes`` on a fresh connection (slow start).

        The first window (``init_cwnd_bytes``) leaves with the request; each later round trip
        doubles the window: n flights carry ``W * (2^n - 1)`` bytes.
        """
        if nbytes <= self.init_cwnd_bytes:
            return 0
        flights = math.ceil(math.log2(nbytes / self.init_cwnd_bytes + 1))
        return flights - 1

    def http_request_s(self, *, new_connection: bool, body_bytes: int = 0) -> float:
        """Network time before the first byte of an HTTP answer."""
        if not new_connection:
            return self.rtt_s
        return self.handshake_s() + (1 + self.slow_start_rtts(body_bytes)) * self.rtt_s

    def ws_connect_s(self) -> float:
        """Opening a websocket: TCP + TLS + the HTTP upgrade (paid once, not per turn)."""
        return self.handshake_s() + self.rtt_s

    def ws_turn_s(self) -> float:
        """A turn on an open websocket: the request frame out, the first event back."""
        return self.rtt_s


def modeled_ttft(network_s: float, engine_ttft_s: float) -> float:
    """What the client sees: network time, then the engine's queue + prefill + first step."""
    return network_s + engine_ttft_s


class ConnectionTracker:
    """Which (host, port) pairs have an open HTTP connection, on a caller-supplied clock."""

    def __init__(
        self, idle_timeout_s: float = KEEPALIVE_IDLE_S, capacity: int = TRACKED_CONNECTIONS
    ) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.capacity = capacity
        self._last: OrderedDict[Any, float] = OrderedDict()  # key -> end of last request

    def begin(self, client: Any, now: float) -> bool:
        """A request starts on ``client``'s connection; True if that connection is new."""
        if client is None:
            return True
        key = tuple(client)
        last = self._last.get(key)
        new = last is None or now - last > self.idle_timeout_s
        self._last[key] = math.inf  # in flight: never idle
        self._last.move_to_end(key)
        while len(self._last) > self.capacity:
            self._last.popitem(last=False)
        return new

    def end(self, client: Any, now: float) -> None:
        if client is not None:
            key = tuple(client)
            if key in self._last:
                self._last[key] = now


def _content_length(scope: dict[str, Any]) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


class NetemMiddleware:
    """ASGI middleware charging each HTTP request its modeled network time before the app."""

    def __init__(
        self,
        app: Any,
        model: NetworkModel,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.app = app
        self.model = model
        self.tracker = ConnectionTracker()
        self.clock = clock
        self.sleep = sleep

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.model.enabled:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        new = self.tracker.begin(client, self.clock())
        delay = self.model.http_request_s(new_connection=new, body_bytes=_content_length(scope))
        token = network_time.set(delay)
        try:
            await self.sleep(self.model.wall(delay))
            await self.app(scope, receive, send)
        finally:
            network_time.reset(token)
            self.tracker.end(client, self.clock())


def install(app: Any, rtt_ms: float, time_scale: float = 1.0) -> NetworkModel:
    """Add the middleware when emulation is on; returns the model (websockets use it too)."""
    model = NetworkModel.from_ms(rtt_ms, time_scale)
    if model.enabled:
        app.add_middleware(NetemMiddleware, model=model)
    return model
