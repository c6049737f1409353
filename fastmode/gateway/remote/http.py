"""A lean HTTP/1.1 client for the gateway's upstream hop (asyncio protocol + httptools' parser).

Why not httpx here: on the hot path (one read per token of every stream) httpx/httpcore/h11 cost
the gateway more CPU than everything else it does per token, and httpcore's pool polls every
idle connection on each request. This client does only what the hop needs: POST/GET with a
body, keep-alive connections per upstream, responses read as they arrive, and flow control
(the socket stops being read while the consumer lags, so nothing piles up in the gateway).

Errors: ``ConnectError`` (no connection: refused, unreachable, connect timeout), ``ReadTimeout``
(silent for longer than the read timeout), ``Disconnected`` (the connection ended before the
response did) and ``ProtocolError`` (not HTTP). A kept-alive connection that turns out to be
closed by the server before any byte of the answer is retried once on a new connection, so a
stale connection never counts as an upstream failure.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator
from typing import cast
from urllib.parse import urlsplit

import httptools

HIGH_WATER = 1 << 18  # bytes buffered for the consumer before the socket stops being read
IDLE_EXPIRY_S = 4.0  # kept-alive connections older than this are dropped (uvicorn closes at 5 s)


class UpstreamError(Exception):
    """Base of the errors below."""


class ConnectError(UpstreamError):
    pass


class ReadTimeout(UpstreamError):
    pass


class Disconnected(UpstreamError):
    pass


class ProtocolError(UpstreamError):
    pass


class _Conn(asyncio.Protocol):
    """One connection; carries one response at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.headers_done = False
        self.keep_alive = False
        self.done = False
        self.error: UpstreamError | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.paused = False
        self.got_bytes = False
        self.last_rx = self.loop.time()
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.read_timeout = 0.0

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream: asyncio's or uvloop's

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.last_rx = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"bad HTTP from the upstream: {exc}"))
            self.close()
            return
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and not self.done and self._ends_at_close():
            self.done = True  # a body delimited by the end of the connection
        elif not self.done:
            self._fail(Disconnected("the upstream closed the connection mid-response"
                                    if self.got_bytes else
                                    "the upstream closed the connection before answering"))
        self._wake()
        # the parser calls back into this connection (a reference cycle): a closed one lets go
        # of it, so that reference counting frees both, not the cyclic collector
        del self.parser

    # -- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        self.done = True

    # -- the consumer side --------------------------------------------------------------------

    def _ends_at_close(self) -> bool:
        return "content-length" not in self.headers and "chunked" not in self.headers.get(
            "transfer-encoding", "")

    def _fail(self, err: UpstreamError) -> None:
        if self.error is None and not self.done:
            self.error = err

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _on_timer(self) -> None:
        self.timer = None
        if self.waiter is None or self.waiter.done():
            return
        left = self.last_rx + self.read_timeout - self.loop.time()
        if left > 0:
            self.timer = self.loop.call_later(left, self._on_timer)
            return
        self._fail(ReadTimeout(f"the upstream sent nothing for {self.read_timeout:g} s"))
        self.close()
        self._wake()

    async def wait(self) -> None:
        """Until something changes (data, end, error), at most ``read_timeout`` of silence."""
        self.waiter = self.loop.create_future()
        if self.timer is None:
            self.timer = self.loop.call_later(self.read_timeout, self._on_timer)
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self) -> bytes:
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()


class Response:
    """An upstream's answer after its headers; the body is read with ``chunks()`` or
    ``read()``; ``aclose()`` returns the connection to the pool when it is reusable."""

    def __init__(self, pool: Pool, conn: _Conn) -> None:
        self._pool = pool
        self._conn = conn
        self.status_code = conn.status
        self.headers = conn.headers
        self._closed = False

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: each item is everything received since the last one."""
        c = self._conn
        while True:
            if c.chunks:
                yield c.take()
                continue
            if c.error is not None:
                raise c.error
            if c.done:
                return
            await c.wait()

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Return the connection to the pool if the answer was read to its end, else close it
        (synchronous: a cancelled stream frees its upstream connection at once)."""
        if self._closed:
            return
        self._closed = True
        c = self._conn
        if c.timer is not None:
            c.timer.cancel()
            c.timer = None
        if c.done and not c.chunks and not c.closed and c.error is None and c.keep_alive:
            self._pool.release(c)
        else:
            c.close()


class Pool:
    """Keep-alive connections to one upstream origin (``scheme://host:port``)."""

    def __init__(self, base_url: str, max_idle: int = 256) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.https = parts.scheme == "https"
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.host_header = parts.netloc
        self.max_idle = max_idle
        self._idle: list[_Conn] = []
        self._ssl = ssl.create_default_context() if self.https else None

    def release(self, conn: _Conn) -> None:
        if len(self._idle) >= self.max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def close(self) -> None:
        for c in self._idle:
            c.close()
        self._idle.clear()

    async def _connect(self, timeout: float) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(loop), self.host, self.port,
                                       ssl=self._ssl), timeout)
        except (TimeoutError, OSError) as exc:
            raise ConnectError(f"cannot connect: {type(exc).__name__}: {exc}") from None
        return conn

    def _reuse(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            c = self._idle.pop()
            if not c.closed and now - c.idle_since < IDLE_EXPIRY_S:
                return c
            c.close()
        return None

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: dict[str, str] | None = None, *, connect_timeout: float = 2.0,
                      read_timeout: float = 60.0) -> Response:
        """Send and wait for the answer's headers (the body is read from the Response)."""
        head = [f"{method} {self.prefix}{path} HTTP/1.1\r\nhost: {self.host_header}\r\n"
                f"content-length: {len(body)}\r\n"]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}\r\n")
        head.append("\r\n")
        raw = "".join(head).encode("latin-1") + body
        reused = self._reuse()
        for attempt in range(2):
            conn = reused if attempt == 0 and reused is not None else await self._connect(
                connect_timeout)
            conn._reset()
            conn.read_timeout = read_timeout
            assert conn.transport is not None
            conn.transport.write(raw)
            try:
                while not conn.headers_done:
                    if conn.error is not None:
                        raise conn.error
                    await conn.wait()
            except Disconnected:
                conn.close()
                if conn is reused and not conn.got_bytes:
                    continue  # a stale kept-alive connection: once more on a new one
                raise
            except BaseException:
                conn.close()
                raise
            return Response(self, conn)
        raise AssertionError("unreachable")
