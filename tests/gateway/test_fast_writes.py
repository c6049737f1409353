"""The request path's shortcuts past the framework, each held to
what it replaces: token events written straight to the connection only while uvicorn's ``send``
would write them at once, the client's hang-up reported by the connection itself, a request's
headers read once, and no access line formatted that no logger would print."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.datastructures import Headers

from fastmode.gateway.edge.connections import HANG_UP, DirectResponse, on_hang_up
from fastmode.gateway.edge.turn_http import plain_headers


class FakeTransport:
    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)


class FakeFlow:
    write_paused = False


class FakeCycle:
    """What ``DirectResponse.write`` and ``on_hang_up`` read of uvicorn's ``RequestResponseCycle``."""

    def __init__(self) -> None:
        self.transport = FakeTransport()
        self.flow = FakeFlow()
        self.disconnected = False
        self.response_complete = False
        self.chunked_encoding: bool | None = True
        setattr(self, HANG_UP, None)  # as GatewayHttp marks its cycles

    async def receive(self) -> dict[str, Any]:
        return {"type": "http.disconnect"}


def test_a_direct_write_is_one_http_chunk() -> None:
    cycle = FakeCycle()
    write = DirectResponse(cycle).write
    assert write(b'data: {"x":1}\n\n') is True
    assert cycle.transport.out == [b'f\r\ndata: {"x":1}\n\n\r\n']
    assert write(b"") is True  # an event of hidden tokens: nothing to write, and no end chunk
    assert cycle.transport.out == [b'f\r\ndata: {"x":1}\n\n\r\n']


@pytest.mark.parametrize("state", ["paused", "disconnected", "complete", "not chunked"])
def test_a_direct_write_declines_where_send_would_not_write_at_once(state: str) -> None:
    cycle = FakeCycle()
    write = DirectResponse(cycle).write
    if state == "paused":
        cycle.flow.write_paused = True  # the client reads slower: send would wait
    elif state == "disconnected":
        cycle.disconnected = True
    elif state == "complete":
        cycle.response_complete = True
    else:
        cycle.chunked_encoding = False  # a content-length body
    assert write(b"data: 1\n\n") is False
    assert cycle.transport.out == []


def test_the_hang_up_hook_goes_on_a_gateway_cycle_only() -> None:
    cycle = FakeCycle()
    called: list[int] = []
    assert on_hang_up(cycle.receive, lambda: called.append(1)) is cycle
    getattr(cycle, HANG_UP)()
    assert called == [1]

    other = FakeCycle()
    delattr(other, HANG_UP)  # another server's cycle: the caller listens for itself
    assert on_hang_up(other.receive, lambda: None) is None

    gone = FakeCycle()
    gone.disconnected = True  # the client left before the stream began
    assert on_hang_up(gone.receive, lambda: None) is None

    async def wrapped() -> dict[str, Any]:  # a middleware's receive: not the cycle's
        return await cycle.receive()

    assert on_hang_up(wrapped, lambda: None) is None


def test_headers_read_once_answer_as_starlette_does() -> None:
    raw = [(b"authorization", b"Bearer first"), (b"x-fastmode-fault", b"500"),
           (b"authorization", b"Bearer second"), (b"content-type", b"application/json")]
    mine, theirs = plain_headers(raw), Headers(raw=raw)
    for name in ("authorization", "x-fastmode-fault", "content-type", "x-missing"):
        assert mine.get(name) == theirs.get(name)


@pytest.mark.parametrize(("level", "logged"), [("warning", False), ("error", False),
                                               ("info", True), ("debug", True),
                                               ("trace", True)])
def test_access_lines_are_made_only_at_a_level_that_prints_them(monkeypatch, level: str,
                                                                 logged: bool) -> None:
    from fastmode.gateway.app import create_app
    from fastmode.gateway.config import load_config
    from fastmode.gateway.edge.shutdown import GatewayServer
    from fastmode.gateway.workers.server import serve

    seen: dict[str, Any] = {}

    def run(self: GatewayServer, sockets: Any = None) -> None:
        seen["access_log"] = self.config.access_log

    monkeypatch.setattr(GatewayServer, "run", run)
    config = load_config()
    serve(create_app(config), config, [], level)
    assert seen["access_log"] is logged


def test_a_streamed_reply_arrives_whole_through_the_direct_writes(live_server: str) -> None:
    """On a real ``fastmode serve``: a streamed reply's events, written straight to the
    connection, parse as the SDK parses them and end with ``[DONE]``."""
    import httpx

    async def go() -> list[str]:
        async with httpx.AsyncClient(base_url=live_server, timeout=30) as c:
            body = {"model": "frontier-spark", "stream": True, "max_tokens": 40, "ignore_eos": True,
                    "messages": [{"role": "user", "content": "write a short poem"}]}
            async with c.stream("POST", "/v1/chat/completions", json=body,
                                headers={"authorization": "Bearer sk-test"}) as r:
                assert r.status_code == 200
                return [line async for line in r.aiter_lines() if line.startswith("data: ")]

    lines = asyncio.run(go())
    assert lines[-1] == "data: [DONE]"
    assert sum('"content":' in line for line in lines) >= 40  # the role chunk + 40 tokens


class RecordingTransport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def uvicorn_cycle(keep_alive: bool, method: str = "POST") -> Any:
    """A real uvicorn request cycle on a transport that records what is written."""
    import logging

    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    done: list[bool] = []
    cycle = RequestResponseCycle(
        {"type": "http", "method": method}, RecordingTransport(), FakeFlow(),  # type: ignore[arg-type]
        logging.getLogger("t"), logging.getLogger("t.access"), False,
        [(b"server", b"uvicorn"), (b"date", b"Sat, 28 Nov 2026 21:00:00 GMT")], asyncio.Event(),
        False, keep_alive, lambda: done.append(True))
    cycle.done = done  # type: ignore[attr-defined]
    return cycle


STREAM_HEADERS = [(b"cache-control", b"no-cache"), (b"x-request-id", b"req-1"),
                  (b"x-fastmode-tier", b"spark"), (b"content-type", b"text/event-stream")]


@pytest.mark.parametrize("keep_alive", [True, False])
def test_a_direct_start_and_end_are_what_uvicorns_send_writes(keep_alive: bool) -> None:
    """The same bytes and the same state as ``send`` leaves for a streamed 200: status line,
    default headers, the response's, ``connection: close`` when the connection is not kept,
    chunked framing, the last chunk with the end marker, and the request's completion."""
    async def by_send() -> Any:
        cycle = uvicorn_cycle(keep_alive)
        await cycle.send({"type": "http.response.start", "status": 200,
                          "headers": STREAM_HEADERS})
        await cycle.send({"type": "http.response.body", "body": b"data: x\n\n",
                          "more_body": True})
        await cycle.send({"type": "http.response.body", "body": b"data: [DONE]\n\n",
                          "more_body": False})
        return cycle

    sent = asyncio.run(by_send())
    cycle = uvicorn_cycle(keep_alive)
    ends = DirectResponse(cycle)
    assert ends.start(list(STREAM_HEADERS)) is True
    assert ends.write(b"data: x\n\n") is True
    assert ends.end(b"data: [DONE]\n\n") is True
    assert cycle.transport.out and b"".join(cycle.transport.out) == b"".join(sent.transport.out)
    for field in ("response_started", "response_complete", "chunked_encoding", "keep_alive"):
        assert getattr(cycle, field) == getattr(sent, field), field
    assert cycle.message_event.is_set() and sent.message_event.is_set()
    assert cycle.done == sent.done == [True]
    assert cycle.transport.closed is sent.transport.closed is (not keep_alive)


@pytest.mark.parametrize("case", ["started", "access log", "framing header", "bad value",
                                  "bad name", "HEAD", "disconnected", "paused"])
def test_a_direct_start_declines_what_send_must_handle(case: str) -> None:
    """Anything but a plain streamed 200 is left to ``send`` (nothing written here)."""
    cycle = uvicorn_cycle(True, "HEAD" if case == "HEAD" else "POST")
    headers = list(STREAM_HEADERS)
    if case == "started":
        cycle.response_started = True
    elif case == "access log":
        cycle.access_log = True
    elif case == "framing header":
        headers.append((b"Content-Length", b"10"))
    elif case == "bad value":
        headers.append((b"x-echo", b"a\r\nset-cookie: x=1"))
    elif case == "bad name":
        headers.append((b"x echo", b"1"))
    elif case == "disconnected":
        cycle.disconnected = True
    elif case == "paused":
        cycle.flow = type("Paused", (), {"write_paused": True})()
    assert DirectResponse(cycle).start(headers) is False
    assert cycle.transport.out == []
    assert cycle.chunked_encoding is None


def test_a_direct_end_declines_before_a_chunked_start() -> None:
    cycle = uvicorn_cycle(True)
    assert DirectResponse(cycle).end(b"data: [DONE]\n\n") is False
    assert cycle.transport.out == [] and not cycle.response_complete


def test_the_server_collects_young_objects_less_often(monkeypatch) -> None:
    """After start-up the heap is frozen and the youngest generation is collected every
    ``GC_YOUNG_THRESHOLD`` allocations (a finished request leaves no cycle to find)."""
    import gc

    import uvicorn

    from fastmode.gateway.edge.shutdown import GC_YOUNG_THRESHOLD, GatewayServer

    async def started(self: Any, sockets: Any = None) -> None:
        return None

    monkeypatch.setattr(uvicorn.Server, "startup", started)
    before = gc.get_threshold()
    server = GatewayServer(uvicorn.Config(app=lambda *a: None), None)  # type: ignore[arg-type]
    try:
        asyncio.run(server.startup())
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
@pytest.mark.parametrize("family", ["ipv4", "unix"])
def test_connection_addresses_are_what_uvicorns_functions_read(loop_kind: str, family: str,
                                                               tmp_path: Any) -> None:
    """``addresses`` reads the saved sockname / peername; uvicorn's ``get_local_addr`` and
    ``get_remote_addr`` ask the socket: the same answers for a TCP connection and a unix
    socket's, on uvloop and on asyncio's own loop."""
    import uvloop
    from uvicorn.protocols.utils import get_local_addr, get_remote_addr

    from fastmode.gateway.edge.connections import addresses

    seen: list[tuple[Any, Any]] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            seen.append((addresses(transport),
                         (get_local_addr(transport), get_remote_addr(transport))))
            transport.close()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        if family == "unix":
            path = str(tmp_path / "s.sock")
            server = await loop.create_unix_server(Probe, path)
            _, w = await asyncio.open_unix_connection(path)
        else:
            server = await loop.create_server(Probe, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            _, w = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        w.close()
        server.close()

    if loop_kind == "uvloop":
        uvloop.run(run())
    else:
        asyncio.run(run())
    ours, uvicorns = seen[0]
    assert ours == uvicorns
    if family == "ipv4":
        assert ours[0] is not None and ours[1] is not None  # a TCP connection has both
        assert ours[0][0] == "127.0.0.1" and ours[1][0] == "127.0.0.1"
    else:
        assert ours[0] is not None and ours[0][1] is None and ours[1] is None


class _Sock:
    """A connected IPv6 socket as the transport's ``socket`` answers: 4-tuples."""

    def getsockname(self) -> tuple[str, int, int, int]:
        return ("::1", 8000, 0, 0)

    def getpeername(self) -> tuple[str, int, int, int]:
        return ("::1", 51000, 0, 0)


class _Transport:
    def __init__(self, saved: bool) -> None:
        self.extra: dict[str, Any] = {"socket": _Sock()}
        if saved:  # what uvloop and asyncio keep from the connection's opening
            self.extra.update(sockname=_Sock().getsockname(), peername=_Sock().getpeername())

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.extra.get(name, default)


@pytest.mark.parametrize("saved", [True, False])
def test_ipv6_addresses_keep_host_and_port_as_uvicorn_does(saved: bool) -> None:
    """An IPv6 address is a 4-tuple (host, port, flow info, scope id); uvicorn keeps its host
    and port, and so does ``addresses``, from the saved addresses or, when the transport saved
    none, by asking the socket uvicorn's way."""
    from uvicorn.protocols.utils import get_local_addr, get_remote_addr

    from fastmode.gateway.edge.connections import addresses

    transport = _Transport(saved)
    assert addresses(transport) == (get_local_addr(transport), get_remote_addr(transport))
    assert addresses(transport) == (("::1", 8000), ("::1", 51000))
