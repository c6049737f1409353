"""Connection hygiene (gateway.connections), on a real ``fastmode serve``: a head that is not
complete in time is answered 408 and closed while real requests go on, connections from one
address are capped, and a pipelined request refused with 431 is answered after the requests
before it, in order."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from configs import with_keys

TIMEOUT_S = 1.0
PER_CLIENT = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    from conftest import start_server, stop_server

    text = with_keys(header_timeout_s=TIMEOUT_S, max_connections_per_client=PER_CLIENT)
    text += "\n[limits]\nmax_header_bytes = 8192\n"
    proc, url = start_server(config_text=text, tmp=tmp_path_factory.mktemp("connections"))
    yield url
    stop_server(proc)


def connect(url: str) -> socket.socket:
    u = urlparse(url)
    return socket.create_connection((u.hostname, u.port), timeout=15)


def read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def statuses(data: bytes) -> list[bytes]:
    return re.findall(rb"HTTP/1\.1 (\d{3}) ", data)


def test_a_head_not_complete_in_time_is_408_and_closed(server) -> None:
    slow = connect(server)
    slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nx-slow: abc")
    idle = connect(server)  # sends nothing at all
    opened = time.monotonic()
    # meanwhile a real request is served as usual
    r = httpx.post(server + "/v1/chat/completions", timeout=30, json={
        "model": "frontier", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    answer = read_all(slow)
    assert time.monotonic() - opened >= TIMEOUT_S * 0.9  # not before the deadline
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"code":"request_timeout"' in answer
    assert read_all(idle) == b""  # closed without a word: it never began a request
    slow.close()
    idle.close()


def test_a_keep_alive_connection_trickling_its_next_head_is_closed(server) -> None:
    with connect(server) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        first = s.recv(65536)
        while not first.endswith(b"}"):  # the whole response (its JSON body may come apart)
            first += s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        begun = time.monotonic()
        answer = b""
        for piece in (b"GET /hea", b"lthz HTT", b"P/1.1\r\n", b"x-a: 1\r\n", b"x-b: 2\r\n"):
            try:
                s.sendall(piece)
            except OSError:
                break
            time.sleep(TIMEOUT_S / 3)  # each byte well within uvicorn's keep-alive timeout
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert time.monotonic() - begun < 10 * TIMEOUT_S


def test_connections_from_one_address_are_capped(server) -> None:
    held = [connect(server) for _ in range(PER_CLIENT)]
    try:
        time.sleep(0.2)  # the server has accepted them
        with connect(server) as extra:
            answer = read_all(extra)
        assert answer.startswith(b"HTTP/1.1 429"), answer[:200]
        assert b"too_many_connections" in answer
        held.pop().close()
        time.sleep(0.2)
        with connect(server) as again:  # a freed place is taken again
            again.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            assert again.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()
    time.sleep(TIMEOUT_S * 1.5)  # the held ones were closed by their deadline anyway


def chat(content: str) -> bytes:
    body = ('{"model":"frontier","max_tokens":20,"messages":[{"role":"user","content":"'
            + content + '"}]}').encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json"
            b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


BIG = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * 20000 + b"\r\n\r\n"


@pytest.mark.parametrize("split", [False, True])
def test_a_pipelined_431_comes_after_the_earlier_responses(server, split) -> None:
    with connect(server) as s:
        if split:  # the big head in its own read, while the chat request is being answered
            s.sendall(chat("hello"))
            time.sleep(0.05)
            s.sendall(BIG)
        else:  # both in one read: the second head's size is its own, not the first one's
            s.sendall(chat("hello") + BIG)
        answer = read_all(s)
    assert statuses(answer) == [b"200", b"431"], answer[:400]
    assert b'"object":"chat.completion"' in answer.split(b"HTTP/1.1 431")[0]


def test_a_closed_websocket_gives_its_place_back(server) -> None:
    from websockets.sync.client import connect as ws_connect

    for _ in range(PER_CLIENT + 2):  # more than the cap, one after the other
        with ws_connect(server.replace("http", "ws") + "/v1/responses", open_timeout=10):
            pass
    time.sleep(0.3)
    held = [connect(server) for _ in range(PER_CLIENT)]  # every place is free again
    try:
        for s in held:
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()


def test_one_timer_sweeps_every_pending_head() -> None:
    """Heads on the clock share one timer (not one per connection): each is answered once its
    deadline has passed, within a quarter of the deadline after it, and the timer stops when
    no head is pending. A loop whose clock the test moves."""
    from fastmode.gateway.edge.connections import _Heads

    class Loop:
        def __init__(self) -> None:
            self.now = 0.0
            self.timers: list[tuple[float, Any]] = []

        def time(self) -> float:
            return self.now

        def call_later(self, delay: float, fn: Any) -> object:
            self.timers.append((self.now + delay, fn))
            return object()

        def run_until(self, t: float) -> None:
            while self.timers and min(self.timers, key=lambda x: x[0])[0] <= t:
                at, fn = min(self.timers, key=lambda x: x[0])
                self.timers.remove((at, fn))
                self.now = at
                fn()
            self.now = t

    class Conn:
        header_timeout_s = 1.0

        def __init__(self, loop: Loop) -> None:
            self.loop = loop
            self.overdue_at: float | None = None

        def _head_overdue(self) -> None:
            self.overdue_at = self.loop.now

    loop = Loop()
    heads = _Heads(loop)
    a, b, done = Conn(loop), Conn(loop), Conn(loop)
    heads.arm(a)  # type: ignore[arg-type]
    heads.arm(done)  # type: ignore[arg-type]
    assert len(loop.timers) == 1  # one timer for both
    loop.run_until(0.4)
    heads.arm(b)  # type: ignore[arg-type]
    heads.pending.pop(done)  # type: ignore[call-overload]  # its head completed in time
    loop.run_until(3.0)
    assert a.overdue_at is not None and 1.0 <= a.overdue_at <= 1.25
    assert b.overdue_at is not None and 1.4 <= b.overdue_at <= 1.4 + 0.25
    assert done.overdue_at is None
    assert not loop.timers and heads.timer is None and not heads.pending  # idle: no timer
