"""gateway/upstream_http.py against raw asyncio servers: framing, keep-alive, failures."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from fastmode.gateway.remote.http import ConnectError, Disconnected, Pool, ReadTimeout


@contextlib.asynccontextmanager
async def raw_server(handler):
    """A TCP server on loopback; ``handler(reader, writer)`` per connection."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


async def test_chunked_stream_arrives_piece_by_piece() -> None:
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"
                     b"x-request-id: r1\r\n\r\n")
        for i in range(3):
            data = b"data: %d\n\n" % i
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with raw_server(handler) as url:
        pool = Pool(url)
        resp = await pool.request("POST", "/v1/x", b"{}", {"content-type": "application/json"})
        assert resp.status_code == 200 and resp.headers["x-request-id"] == "r1"
        loop = asyncio.get_running_loop()
        got = []
        async for piece in resp.chunks():
            got.append((loop.time(), piece))
        assert [p for _, p in got] == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"]
        assert got[-1][0] - got[0][0] >= 0.08  # delivered as they came, not at the end
        await resp.aclose()
        pool.close()


async def test_keep_alive_reuse_and_stale_connection_retried() -> None:
    connections = 0

    async def handler(reader, writer):
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        if connections == 1:  # answer a second request on the same connection...
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            await read_request(reader)  # ...then close it on the third, unanswered
        writer.close()

    async with raw_server(handler) as url:
        pool = Pool(url)
        for _ in range(3):
            resp = await pool.request("GET", "/healthz")
            assert await resp.read() == b"ok"
            await resp.aclose()
        assert connections == 2  # reused once; the stale one retried on a new connection
        pool.close()


async def test_body_until_close_and_failures() -> None:
    async def handler(reader, writer):
        req = await read_request(reader)
        if b"/eof" in req:
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        elif b"/cut" in req:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        elif b"/silent" in req:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(2)
        await writer.drain()
        writer.close()

    async with raw_server(handler) as url:
        pool = Pool(url)
        resp = await pool.request("GET", "/eof")
        assert await resp.read() == b"all of it"
        resp = await pool.request("GET", "/cut")
        with pytest.raises(Disconnected):
            await resp.read()
        await resp.aclose()
        resp = await pool.request("GET", "/silent", read_timeout=0.2)
        with pytest.raises(ReadTimeout):
            await resp.read()
        await resp.aclose()
        pool.close()
    with pytest.raises(ConnectError):
        await Pool(url).request("GET", "/", connect_timeout=1)
