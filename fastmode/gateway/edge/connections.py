"""The HTTP connection itself: a bounded head, a deadline to send it, and caps on connections.

``GatewayHttp`` is uvicorn's httptools protocol (what ``fastmode serve`` runs) with the
defences that must act before a request reaches the app, because until its head is complete
there is no request to refuse:

* **a bound on the head** (``limits.max_header_bytes``, 431): uvicorn buffers a head without
  limit; this counts its bytes as they arrive and refuses once they pass the bound, before the
  rest is buffered. The head is counted from the first byte of a request: a chunk that leaves it
  incomplete counts whole, the chunk that completes it counts up to the blank line that ends it,
  and a head that begins inside a chunk after another request (pipelining) counts what the
  parser read of it (URL and header lines). A 431 behind requests still being answered on the
  connection waits for their responses, so each response goes out in its request's order;
* **a deadline for the head** (``server.header_timeout_s``): a slowloris client opens many
  connections and sends each head a byte at a time; uvicorn waits forever (its keep-alive
  timeout only runs between requests, and any byte cancels it). The deadline runs from a
  connection's opening, or from the first byte of a keep-alive connection's next request, to
  the end of the head: past it a connection that sent part of a head is answered 408 and
  closed, one that sent nothing is closed (one timer checks every pending head, a quarter of
  the deadline apart: a head is answered up to 25% after its deadline);
* **caps on connections** (``server.max_connections`` in all, ``server.max_connections_per_client``
  from one client address): past them a new connection is answered at once (503 / 429,
  ``connection: close``) and closed, so thousands of idle or trickling connections cannot take
  every file descriptor of the process (uvicorn's own ``limit_concurrency`` still accepts and
  keeps the connection, answering 503 only once a head is complete).

A websocket upgraded from a connection stays counted until it closes (``release``, called by
``gateway.edge.shutdown.DrainingWebSocket``). The settings are class attributes set by
``gateway.workers.server.serve`` (one server per process).
"""

from __future__ import annotations

import re
from asyncio import TimerHandle
from collections.abc import Callable
from typing import Any

import httptools
import orjson
from uvicorn.logging import TRACE_LOG_LEVEL
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import get_local_addr, get_remote_addr, is_ssl

from fastmode.gateway.errors import APIError
from fastmode.gateway.observe.rejections import log_rejected
from fastmode.gateway.values.ids import new_id

LINGER_S = 1.0  # a refused head: further bytes are dropped this long before the close
HANG_UP = "on_hang_up"  # attribute of a request's cycle: what to call if the client goes away
_COUNTS = "fastmode_clients"  # attribute of uvicorn's ServerState: open connections per address


class DirectResponse:
    """``cycle``'s streamed response written straight to its transport, as uvicorn's ``send``
    writes it for a ``200`` with these headers and no length: ``start`` (status line, the
    server's default headers, ``connection: close`` if the connection will not be kept,
    ``transfer-encoding: chunked``), ``write`` (one more chunk of the body) and ``end`` (the last
    chunk, then the request's completion), with uvicorn's state set as ``send`` sets it.

    It skips the message dicts, the middleware's ``send`` wrappers, the coroutine per message,
    and ``send``'s two regular expressions per header (here one over all the names and one over
    all the values): ~2 us per token event, and, for the start and end, with the body limit's
    frame, ~1.5% of a short streamed request's instructions (``bench/request_instructions.py``).
    Each method returns False, having written nothing, whenever ``send`` would do anything
    else (the access log on, the client gone, the transport paused, the response not started,
    started already or complete, a framing header or a bad header byte): the caller then uses
    ``send``."""

    __slots__ = ("cycle", "transport", "flow")

    def __init__(self, cycle: Any) -> None:
        self.cycle = cycle
        self.transport = cycle.transport
        self.flow = cycle.flow

    def start(self, headers: list[tuple[bytes, bytes]]) -> bool:
        cycle = self.cycle
        if (cycle.response_started or cycle.disconnected or self.flow.write_paused
                or cycle.access_log or cycle.chunked_encoding is not None
                or cycle.scope["method"] == "HEAD"):
            return False
        headers = cycle.default_headers + headers
        head = [_STATUS_200]
        for name, value in headers:
            name = name.lower()
            if name in _FRAMING:
                return False  # ``send`` reads it to frame the response
            head += (name, b": ", value, b"\r\n")
        if (_NAME_BAD.search(b"-".join([n for n, _ in headers]))
                or _VALUE_BAD.search(b"\t".join([v for _, v in headers]))):
            return False  # ``send`` raises what is wrong
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        cycle.chunked_encoding = True
        if not cycle.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"transfer-encoding: chunked\r\n\r\n")
        self.transport.write(b"".join(head))
        return True

    def write(self, body: bytes) -> bool:
        """One more chunk of the body (an empty one writes nothing: it is not the end)."""
        return self.write_chunk(b"%x\r\n%b\r\n" % (len(body), body) if body else b"")

    def write_chunk(self, chunk: bytes) -> bool:
        """``write`` of a body framed already: ``chunk`` is one HTTP chunk (or nothing)."""
        cycle = self.cycle
        if (self.flow.write_paused or cycle.disconnected or cycle.response_complete
                or cycle.chunked_encoding is not True):
            return False
        if chunk:
            self.transport.write(chunk)
        return True

    def end(self, body: bytes) -> bool:
        cycle = self.cycle
        if (cycle.disconnected or cycle.response_complete or self.flow.write_paused
                or cycle.chunked_encoding is not True):
            return False
        self.transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body) if body
                             else b"0\r\n\r\n")
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            self.transport.close()
        cycle.on_response()
        return True


# uvicorn's checks of a header's name and value (``httptools_impl``), over all of them at once
# (names joined with "-", values with a tab: both allowed where they are joined)
_NAME_BAD = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_VALUE_BAD = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
# the headers ``send`` reads to frame the response
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))
_STATUS_200 = b"HTTP/1.1 200 OK\r\n"


def on_hang_up(receive: Any, hook: Callable[[], None]) -> Any:
    """Put ``hook`` on the request cycle ``receive`` reads from, if it is a ``GatewayHttp``
    cycle still connected: its connection calls the hook when the client goes away. The
    cycle, or None (another server, a wrapped ``receive``, a client already gone): the
    caller then listens for ``http.disconnect`` itself."""
    cycle = getattr(receive, "__self__", None)
    if cycle is None or getattr(cycle, HANG_UP, False) is not None or cycle.disconnected:
        return None
    hang_up_hook(cycle, hook)
    return cycle


def hang_up_hook(cycle: Any, hook: Callable[[], None] | None) -> None:
    """Set (or, with None, take off) the hook ``cycle``'s connection calls on a hang-up."""
    setattr(cycle, HANG_UP, hook)


class _HeadTooLarge(Exception):
    """Raised inside the parser's headers-complete callback to stop before any dispatch."""


def _client_counts(server_state: Any) -> dict[str, int]:
    counts = getattr(server_state, _COUNTS, None)
    if counts is None:
        counts = {}
        setattr(server_state, _COUNTS, counts)
    return counts


class _Heads:
    """The connections whose head is on the clock, swept by one timer for all of them.

    A timer per connection (``loop.call_later`` at each head, cancelled when the head is
    complete) cost ~8,000 instructions per request (callgrind); here a head is one
    ``set.add`` and one ``discard``, and one timer runs every ``SWEEPS`` th of the deadline
    while any head is pending, so a head is answered 408 between ``header_timeout_s`` and
    ``header_timeout_s * (1 + 1 / SWEEPS)`` after it began."""

    SWEEPS = 4

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.pending: dict[GatewayHttp, float] = {}  # connection -> loop time its head began
        self.timer: TimerHandle | None = None

    def arm(self, conn: GatewayHttp) -> None:
        self.pending[conn] = self.loop.time()
        if self.timer is None:
            self.timer = self.loop.call_later(conn.header_timeout_s / self.SWEEPS, self.sweep)

    def sweep(self) -> None:
        self.timer = None
        now = self.loop.time()
        for conn, since in list(self.pending.items()):
            if now - since >= conn.header_timeout_s:
                del self.pending[conn]
                conn._head_overdue()
        if self.pending:
            timeout = next(iter(self.pending)).header_timeout_s
            self.timer = self.loop.call_later(timeout / self.SWEEPS, self.sweep)


_HEADS = "fastmode_heads"  # attribute of uvicorn's ServerState: its ``_Heads``


def _heads(server_state: Any, loop: Any) -> _Heads:
    heads = getattr(server_state, _HEADS, None)
    if heads is None or heads.loop is not loop:
        heads = _Heads(loop)
        setattr(server_state, _HEADS, heads)
    return heads


def release(protocol: Any) -> None:
    """A counted connection closed (its HTTP protocol, or the websocket it became)."""
    counted = getattr(protocol, "_counted", None)
    if counted is None:
        return
    protocol._counted = None
    counts, host = counted
    if host in counts:
        counts[host] -= 1
        if counts[host] <= 0:
            del counts[host]


def _answer(status: int, reason: str, path: bytes, error: APIError,
            extra: bytes = b"") -> bytes:
    """A whole ``connection: close`` response with the error body in the route's format."""
    from fastmode.gateway.protocols import (
        for_path,  # the route's own error format (OpenAI's, Anthropic's)
    )

    route = path.split(b"?", 1)[0].decode("latin-1")
    body = orjson.dumps(for_path(route).error_body(error, new_id("req")))
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n".encode() + extra
            + b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
            + body)


def addresses(transport: Any) -> tuple[tuple[str, int | None] | None, tuple[str, int] | None]:
    """The connection's (server, client) addresses as uvicorn's ``get_local_addr`` and
    ``get_remote_addr`` give them, read from the ``sockname`` / ``peername`` the transport saved
    when the connection was made (uvloop and asyncio both do). uvicorn's functions ask the
    ``socket`` instead, and uvloop makes a socket object for each question: four
    ``getsockname`` and a ``getpeername`` per connection, ~5 µs. A transport that saved no
    ``sockname`` is asked uvicorn's way."""
    sock = transport.get_extra_info("sockname")
    if sock is None:
        return get_local_addr(transport), get_remote_addr(transport)
    if isinstance(sock, tuple):  # (host, port), or (host, port, flow, scope) for IPv6
        server: tuple[str, int | None] | None = (str(sock[0]), int(sock[1]))
    else:
        server = (sock, None) if isinstance(sock, str) else None  # a unix socket's path
    peer = transport.get_extra_info("peername")
    client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
    return server, client


class GatewayHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head bound, the head deadline and the caps."""

    max_header_bytes = 32 * 1024
    header_timeout_s = 10.0
    max_connections = 8192
    max_connections_per_client = 2048

    def connection_made(self, transport: Any) -> None:
        # uvicorn's ``connection_made`` (0.54), with the addresses from ``addresses``
        self.connections.add(self)
        self.transport = transport
        self.flow = FlowControl(transport)
        self.server, self.client = addresses(transport)
        self.scheme = "https" if is_ssl(transport) else "http"
        if self.logger.level <= TRACE_LOG_LEVEL:
            prefix = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection made", prefix)
        self._in_head = True  # between a message's first byte and its headers' end
        self._head = 0  # bytes of the current head in earlier chunks
        self._tail = b""  # the last bytes of the previous chunk (a split blank line)
        self._chunk = b""  # the chunk being parsed
        self._chunk_in_head = False  # that chunk began inside a head
        self._path = b""  # from the request line, for the error format of the route
        self._refused = False
        self._pending: bytes | None = None  # a 431 waiting for earlier responses to go out
        self._heads = 0  # heads completed on this connection
        self._counted: tuple[dict[str, int], str] | None = None  # (counts, address)
        self._clock = _heads(self.server_state, self.loop)  # the head's deadline, swept
        if not self._admit():
            return
        self._clock.arm(self)

    # -- caps ---------------------------------------------------------------------------------

    def _admit(self) -> bool:
        host = self.client[0] if self.client else None
        if not host:  # a unix socket (a worker's private metrics socket): no address to count
            return True
        counts = _client_counts(self.server_state)
        if len(self.connections) > self.max_connections:
            error = APIError(503, f"The server holds its maximum of {self.max_connections} "
                             "connections; retry shortly.", code="too_many_connections",
                             type="server_error")
            self._close_with(_answer(503, "Service Unavailable", b"/", error,
                                     b"retry-after: 1\r\n"))
            return False
        if counts.get(host, 0) >= self.max_connections_per_client:
            error = APIError(429, f"Too many connections from {host} (at most "
                             f"{self.max_connections_per_client}).", code="too_many_connections")
            self._close_with(_answer(429, "Too Many Requests", b"/", error,
                                     b"retry-after: 1\r\n"))
            return False
        counts[host] = counts.get(host, 0) + 1
        self._counted = (counts, host)
        return True

    def _close_with(self, response: bytes) -> None:
        self._refused = True
        self.transport.write(response)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        release(self)
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and not cycle.response_complete:
            hook = getattr(cycle, HANG_UP, None)
            if hook is not None:  # a stream in flight (``gateway.edge.turn_http``): it ends now
                hook()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()
        counted, self._counted = self._counted, None  # the websocket protocol releases it
        super().handle_websocket_upgrade()
        ws = self.transport.get_protocol()
        if ws is not self and counted is not None:
            ws._counted = counted  # type: ignore[attr-defined]

    # -- the head's deadline ------------------------------------------------------------------

    def _disarm(self) -> None:
        self._clock.pending.pop(self, None)

    def _head_overdue(self) -> None:
        if self._refused or self.transport.is_closing():
            return
        if not self._in_head or (self.cycle is not None and not self.cycle.response_complete):
            return  # a request is being served: uvicorn's keep-alive timer takes over after it
        if self._head == 0 and self._heads == 0 and not self._path:
            self.transport.close()  # nothing was sent at all
            return
        error = APIError(408, f"The request head was not complete within "
                         f"{self.header_timeout_s:g} s.", code="request_timeout",
                         type="timeout_error")
        self._close_with(_answer(408, "Request Timeout", self._path, error))

    # -- the head's size ----------------------------------------------------------------------

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head, self._tail = True, 0, b""

    def on_headers_complete(self) -> None:
        # what the parser read of this head: request line and header lines
        size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers) + 16
        if self._chunk_in_head:  # the chunk began in this head: count it to its blank line
            seen = self._tail + self._chunk
            end = seen.find(b"\r\n\r\n")
            size = max(size, self._head + (end + 4 - len(self._tail) if end >= 0
                                           else len(self._chunk)))
        self._chunk_in_head = False  # a later head in this chunk counts by what was parsed
        self._in_head, self._head, self._tail = False, 0, b""
        self._heads += 1
        self._disarm()
        if size > self.max_header_bytes:
            raise _HeadTooLarge()  # before the request is dispatched
        super().on_headers_complete()
        if self.cycle is not None:  # a stream may hang a hook here (``on_hang_up``)
            hang_up_hook(self.cycle, None)

    def data_received(self, data: bytes) -> None:
        """uvicorn's, with the head counted and a 431 instead of a dispatch past the bound."""
        if self._refused:
            return  # the rest of a refused request: read and dropped (a lingering close)
        if self._in_head and not self._head:  # "METHOD /path HTTP/1.1" starts the head
            self._path = data[:2048].split(b" ", 2)[1] if data.count(b" ", 0, 2048) >= 2 else b""
            if self not in self._clock.pending and self._idle():  # a keep-alive's next head
                self._clock.arm(self)
        self._unset_keepalive_if_required()
        self._chunk, self._chunk_in_head = data, self._in_head
        was_in_head, heads = self._in_head, self._heads
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._refuse()
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        finally:
            self._chunk = b""
        if was_in_head and heads == self._heads:  # no head ended here: the chunk counts whole
            self._head += len(data)
            self._tail = data[-3:]
            if self._head > self.max_header_bytes:
                self._refuse()

    def _idle(self) -> bool:
        """No request of this connection is being answered (nor queued behind one)."""
        return (self.cycle is None or self.cycle.response_complete) and not self.pipeline

    def _refuse(self) -> None:
        error = APIError(
            431, f"The request's headers are larger than {self.max_header_bytes} bytes.",
            code="request_header_fields_too_large")
        self._refused = True  # what else comes is dropped
        self._disarm()
        # told in one line (its method and headers were never read: "-")
        log_rejected(f"- {self._path.split(b'?', 1)[0].decode('latin-1')}", 431, error, None)
        response = _answer(431, "Request Header Fields Too Large", self._path, error)
        if self._idle():
            self._linger(response)
        else:  # earlier requests are still being answered: the 431 goes after them
            self._pending = response

    def _linger(self, response: bytes) -> None:
        self.transport.write(response)
        # a lingering close: closing while the client still sends its head would reset the
        # connection before it reads the 431; drop what comes for a second, then close
        self.loop.call_later(LINGER_S, self.transport.close)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._pending is not None and self._idle() and not self.transport.is_closing():
            self._unset_keepalive_if_required()
            response, self._pending = self._pending, None
            self._linger(response)
