"""Push mode (``gateway.pipeline.push``): token events written from the engine's step, in process.

What must hold: the same bytes as the turn's own loop, each event handed over in the step that
produced its last token; a write that has to wait (a slow reader) hands the stream back to the
turn's task without losing or reordering anything; a write that fails reaches the transport as
its own error; an early end (shutdown) still closes with the protocol's error event; and the
slot is free at the end in every case.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import httpx
import orjson
import pytest
from test_stream_interval import BODIES, N_TOKENS, REPLY, config, sse_data

from fastmode.gateway import protocols
from fastmode.gateway.app import create_app
from fastmode.gateway.errors import APIError
from fastmode.gateway.pipeline.push import SENT, WriteFailed, finish_send, start_send
from fastmode.gateway.pipeline.turn import Turn
from fastmode.gateway.protocols.base import RequestContext
from fastmode.gateway.state import CUT

CHAT = BODIES["/v1/chat/completions"]


@pytest.fixture
async def app_for(tmp_path) -> AsyncIterator[Callable]:
    stack = []

    async def make(interval: int):
        app = create_app(config(interval, tmp_path))
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        stack.append(ctx)
        return app

    yield make
    for ctx in reversed(stack):
        await ctx.__aexit__(None, None, None)


async def started(app, body=CHAT) -> Turn:
    proto = protocols.ENDPOINTS["/chat/completions"]
    turn = Turn(app.state.gateway, proto, proto.validate(body),
                RequestContext({}, False, app.state.responses))
    await turn.start()
    return turn


def text_of(chunks: list[bytes]) -> str:
    events = sse_data(b"".join(chunks).decode())
    return "".join(e["choices"][0]["delta"].get("content", "") for e in events
                   if e.get("choices"))


async def busy(app) -> int:
    """Sequences the replicas still hold once they stepped (a cancelled one leaves its slot at
    the next step): polled, bounded."""
    def held() -> int:
        return sum(r.scheduler.running for d in app.state.gateway.deployments.values()
                   for r in d.replicas)
    for _ in range(500):
        if not held():
            return 0
        await asyncio.sleep(0.002)
    return held()


@pytest.mark.parametrize("interval", [1, 8])
async def test_pushed_events_are_the_same_bytes_sent_when_due(app_for, interval) -> None:
    app = await app_for(interval)
    turn = await started(app)
    stream = turn.job.stream
    enc = turn.encoder
    sent: list[bytes] = []
    pushes = []

    async def write(body: bytes) -> None:
        sent.append(body)

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        seq, replica = stream.seq, stream.replica
        produced = min(replica.done_index - seq.first_step + 1, seq.output_tokens)
        pushes.append((start + count, produced, stream.last_at, replica.done_end))
        return write((lead or b"") + enc.sse_tokens(start, count))

    async for chunk in turn.sse(push):
        sent.append(chunk)
    events = math.ceil(N_TOKENS / interval)
    assert len(pushes) >= events - 1  # all but the first event were pushed by the engine
    for upto, produced, last_at, step_end in pushes:
        assert upto == produced  # handed over in the step that produced its last token
        assert last_at == pytest.approx(step_end)
    assert text_of(sent) == REPLY[: len(text_of(sent))] and len(text_of(sent)) > 0
    reference = await started(app)
    pulled = [chunk async for chunk in reference.sse()]
    assert text_of(sent) == text_of(pulled)
    assert sent[-1].endswith(b"data: [DONE]\n\n") and pulled[-1].endswith(b"data: [DONE]\n\n")
    assert turn.job.settled and turn.job.billed_output == N_TOKENS
    assert await busy(app) == 0


async def test_the_first_token_is_pushed_with_the_role_chunk(app_for) -> None:
    """A stream that begins before its first token (a long prompt: ~0.1 s of modeled prefill)
    is in push mode from the start: the engine's step writes the first event too, with Chat's
    role chunk ahead of it in the same write, and the turn's task is not woken for it."""
    app = await app_for(1)
    body = {**CHAT, "messages": [{"role": "user", "content": "word " * 60_000}]}
    turn = await started(app, body)
    stream, enc = turn.job.stream, turn.encoder
    assert stream.produced() == 0  # the prefill is still running
    pushes: list[tuple[int, int, bytes | None]] = []
    sent: list[bytes] = []

    async def write(body: bytes) -> None:
        sent.append(body)

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        pushes.append((start, count, lead))
        return write((lead or b"") + enc.sse_tokens(start, count))

    async for chunk in turn.sse(push):
        sent.append(chunk)
    assert [(s, c) for s, c, _ in pushes] == [(i, 1) for i in range(N_TOKENS)]
    lead = pushes[0][2]
    assert lead is not None and b'"role":"assistant"' in lead
    assert all(lead is None for _, _, lead in pushes[1:])
    first = sse_data(sent[0].decode())
    assert first[0]["choices"][0]["delta"]["role"] == "assistant"
    assert first[1]["choices"][0]["delta"]["content"]  # the first token, in the same write
    pulled = [chunk async for chunk in (await started(app, body)).sse()]
    whole = b"".join(sent)  # the same events as the turn's own loop sends, role once
    assert whole.count(b"data: ") == b"".join(pulled).count(b"data: ")
    assert whole.count(b'"role":"assistant"') == 1 and whole.endswith(b"data: [DONE]\n\n")
    assert turn.job.settled and await busy(app) == 0


async def test_a_write_that_waits_hands_back_to_the_turn_and_loses_nothing(app_for) -> None:
    """Every third pushed write has to wait (the socket is full): the turn's task finishes it,
    waits for tokens itself, and pushing resumes; nothing is lost or reordered."""
    app = await app_for(1)
    turn = await started(app)
    enc = turn.encoder
    sent: list[bytes] = []
    calls = [0]

    async def slow_write(body: bytes) -> None:
        await asyncio.sleep(0.003)
        sent.append(body)

    async def write(body: bytes) -> None:
        calls[0] += 1
        if calls[0] % 3 == 0:
            await slow_write(body)
        else:
            sent.append(body)

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        return write((lead or b"") + enc.sse_tokens(start, count))

    async for chunk in turn.sse(push):
        sent.append(chunk)
    assert calls[0] >= 3
    assert text_of(sent) == REPLY[: len(text_of(sent))]
    assert turn.job.billed_output == N_TOKENS
    assert b"[DONE]" in sent[-1]
    assert await busy(app) == 0


async def test_a_write_that_fails_reaches_the_transport_as_its_own_error(app_for) -> None:
    app = await app_for(1)
    turn = await started(app)
    pushed = [0]

    async def broken(_: bytes) -> None:
        raise ConnectionResetError("peer gone")

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        pushed[0] += 1
        return broken(b"")

    with pytest.raises(ConnectionResetError):
        async for _ in turn.sse(push):
            pass
    assert pushed[0] == 1
    assert turn.job.settled  # exactly once, as a client gone
    assert await busy(app) == 0


async def test_an_end_while_pushing_closes_with_the_error_event(app_for) -> None:
    """A graceful shutdown (``end_with``) cancels the job while the engine pushes: the stream
    closes with Chat's error event, billed for the tokens sent."""
    app = await app_for(1)
    turn = await started(app)
    enc = turn.encoder
    sent: list[bytes] = []

    async def write(body: bytes) -> None:
        sent.append(body)
        if turn.job.stream.delivered >= 10:
            turn.end_with(APIError(503, "shutting down", code="shutting_down"), 503, CUT,
                          "shutdown")

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        return write((lead or b"") + enc.sse_tokens(start, count))

    async for chunk in turn.sse(push):
        sent.append(chunk)
    last = orjson.loads(sent[-1].split(b"data: ")[1])
    assert last["error"]["code"] == "shutting_down"
    assert 10 <= turn.job.billed_output < N_TOKENS
    assert await busy(app) == 0


async def test_a_send_that_waits_is_finished_by_the_awaiting_task() -> None:
    """What push mode does with a send that had to wait: the turn's task drives the rest;
    what it raises comes out as WriteFailed; a cancellation reaches the send itself."""
    log: list[str] = []
    gate = asyncio.Event()

    async def waits() -> None:
        log.append("before")
        await gate.wait()
        log.append("after")

    sender, waiting = start_send(waits())
    assert log == ["before"] and waiting is not SENT
    asyncio.get_running_loop().call_later(0.001, gate.set)
    await finish_send(sender, waiting)
    assert log[-1] == "after"

    async def returns_at_once() -> None:
        log.append("at once")

    assert start_send(returns_at_once())[1] is SENT and log[-1] == "at once"

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise OSError("closed")

    sender, waiting = start_send(fails_later())
    with pytest.raises(WriteFailed) as info:
        await finish_send(sender, waiting)
    assert isinstance(info.value.error, OSError)

    closed: list[bool] = []

    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            closed.append(True)

    task = asyncio.ensure_future(finish_send(*start_send(hangs())))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == [True]


def test_the_real_server_path_pushes_over_http(tmp_path) -> None:
    """Through the app and its ASGI send: the reply arrives whole, in order, one event per
    token (the engine wrote all but the first)."""

    async def main() -> str:
        app = create_app(config(1, tmp_path))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                r = await client.post("/v1/chat/completions", json=CHAT)
                assert await busy(app) == 0
                return r.text

    text = asyncio.run(main())
    events = sse_data(text)
    deltas = [e["choices"][0]["delta"]["content"] for e in events
              if e.get("choices") and "content" in e["choices"][0]["delta"]
              and "role" not in e["choices"][0]["delta"]]
    assert len(deltas) == N_TOKENS and "".join(deltas) == REPLY[: len("".join(deltas))]


def test_a_reader_that_pauses_gets_the_whole_stream_over_a_real_socket(server_factory) -> None:
    """A real server and a reader that stops reading for 0.4 s (the socket fills, a pushed
    write has to wait, the turn's task takes over), then reads on: every token arrives, in
    order, the stream completes, and the ledger bills it once as completed."""
    from urllib.parse import urlparse

    from configs import with_keys

    url = server_factory(config_text=with_keys(stream_max_lag_s=5,
                                               socket_send_buffer_bytes=16384))
    u = urlparse(url)

    def spark_usage() -> tuple[int, int]:
        rows = [r for r in httpx.get(url + "/v1/usage").json()["data"] if r["tier"] == "spark"]
        return sum(r["requests"] for r in rows), sum(r["output_tokens"] for r in rows)

    before = spark_usage()
    body = orjson.dumps({"model": "frontier-spark", "messages": [{"role": "user",
                         "content": "push test"}], "max_tokens": 1500, "stream": True,
                         "ignore_eos": True, "stream_options": {"include_usage": True}})
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((u.hostname, u.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nconnection: close\r\n"
              b"content-type: application/json\r\ncontent-length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(0.4)  # the reader pauses: the server's writes have to wait
    s.settimeout(20)
    raw = b""
    while chunk := s.recv(65536):
        raw += chunk
    s.close()
    events = [orjson.loads(line[6:]) for line in raw.split(b"\n")
              if line.startswith(b"data: {")]
    deltas = [e["choices"][0]["delta"]["content"] for e in events
              if e.get("choices") and "content" in e["choices"][0]["delta"]
              and "role" not in e["choices"][0]["delta"]]
    usage = next(e["usage"] for e in events if e.get("usage"))
    assert len(deltas) == usage["completion_tokens"] == 1500
    assert b"data: [DONE]" in raw
    deadline = time.monotonic() + 10  # the ledger is written off the hot path
    while (after := spark_usage()) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1500)


def test_a_shared_reply_is_laid_out_once_and_groups_the_same() -> None:
    """A scripted reply is one immutable Generation shared by every request: its ``Runs`` are
    made once; another reply (even an equal one) gets its own; grouping from the shared layout
    gives the same events as grouping piece by piece."""
    from fastmode.backends.mockmodel import TEXT, Piece
    from fastmode.gateway.protocols.events import grouped, runs_of

    # 20 tokens of text, then 3 of the first tool call's arguments
    pieces = tuple(Piece(f"w{i} ", TEXT) for i in range(20)) + (Piece('{"a":', 0),) * 3
    assert runs_of(pieces) is runs_of(pieces)
    other = pieces[:-1] + (Piece('{"a":', 0),)  # an equal reply, a separate object
    assert other == pieces and runs_of(other) is not runs_of(pieces)
    fast = [(i, p.text, p.tool) for i, p in grouped(pieces, 0, 23, 8, None, None,
                                                    runs_of(pieces))]
    slow = [(i, p.text, p.tool) for i, p in grouped(pieces, 0, 23, 8, None, None)]
    assert fast == slow and len(fast) == 4  # 8 + 8 + (4 text, 3 arguments)


async def test_a_websocket_write_that_fails_while_pushing_ends_the_turn_quietly(
        app_for, caplog) -> None:
    """Over the websocket a pushed event is the server's own send; when it raises (the peer
    went away), the turn ends as a socket gone — settled once, its slot freed — not as a bug
    of the turn (no "turn failed" log, no error event attempted)."""
    app = await app_for(1)
    body = {"type": "response.create", **BODIES["/v1/responses"]}
    del body["stream"]
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for message in ({"type": "websocket.connect"},
                    {"type": "websocket.receive", "text": orjson.dumps(body).decode()}):
        inbox.put_nowait(message)
    deltas: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            event = orjson.loads(message["text"])
            if event["type"] == "response.output_text.delta":
                if len(deltas) == 5:  # the sixth token event: the peer is gone (the server
                    # hears of it from its reader a moment after the write failed)
                    asyncio.get_running_loop().call_later(
                        0.05, inbox.put_nowait, {"type": "websocket.disconnect", "code": 1006})
                    raise ConnectionResetError("peer gone")
                deltas.append(event["delta"])

    scope = {"type": "websocket", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "scheme": "ws", "path": "/v1/responses", "raw_path": b"/v1/responses",
             "query_string": b"", "root_path": "", "headers": [], "subprotocols": [],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000), "state": {}}
    gateway = app.state.gateway
    settled: list[tuple[int, Any]] = []
    settle = gateway.settle

    def counted(job: Any, status: int = 200, ended: str | None = None) -> None:
        if not job.settled:
            settled.append((status, job))
        settle(job, status, ended)

    gateway.settle = counted
    with caplog.at_level("ERROR"):
        await asyncio.wait_for(app(scope, inbox.get, send), 10)
    assert len(deltas) == 5 and "".join(deltas) == REPLY[: len("".join(deltas))]
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(settled) == 1 and settled[0][0] == 499  # once, as a client gone
    assert 5 <= settled[0][1].billed_output < N_TOKENS  # what was made, not the whole reply
    assert await busy(app) == 0


@pytest.mark.parametrize("interval", [1, 8])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
async def test_text_deltas_written_as_sse_are_the_framed_events(app_for, path, interval) -> None:
    """Over SSE an encoder writes its text deltas as their SSE bytes (``WIRE``): the stream
    is byte for byte what framing its plain events gives."""
    from fastmode.gateway.protocols.events import WIRE

    app = await app_for(interval)
    proto = protocols.ENDPOINTS[path[len("/v1"):]]
    turn = Turn(app.state.gateway, proto, proto.validate(BODIES[path]),
                RequestContext({}, False, app.state.responses))
    await turn.start()
    job, wired = turn.job, turn.encoder
    plain = proto.encoder(job, turn.req, turn.request)
    n = job.gen.output_tokens
    for enc in (wired, plain):
        enc.interval = interval
        enc.opening()
    sent = b"".join(wired.sse_tokens(s, min(interval, n - s)) for s in range(0, n, interval))
    assert sent == plain.sse(plain.tokens(0, n))
    assert any(kind is WIRE for kind, _ in wired.buffer.frames)  # the framed path was taken
    job.cancel()
    turn.settle(499)


async def test_streams_that_start_together_encode_their_runs_on_different_tokens(app_for) -> None:
    """Streams admitted in one engine step stay in step. Their event buffers' first runs are
    short by shares of a run that differ from one buffer to the next, so their later runs fall
    on tokens of their own (no burst of encoding inside one step), and each stream's bytes are
    the same as its encoder writes without a buffer."""
    app = await app_for(8)
    body = {**CHAT, "messages": [{"role": "user", "content": "write about the sea"}],
            "max_tokens": 200, "ignore_eos": True}
    turns = [await started(app, body) for _ in range(8)]
    next_runs = set()
    for turn in turns:
        enc = turn.encoder
        assert enc is not None and turn.job is not None
        enc.interval = 8  # as the turn's loop sets it from the tier
        sent = [enc.sse_tokens(0, 8)]
        assert enc.buffer is not None
        next_runs.add(enc.buffer.encoded)  # where this buffer's next run begins
        sent += [enc.sse_tokens(t, 8) for t in range(8, 200, 8)]
        plain = turn.protocol.encoder(turn.job, turn.req, turn.request)
        plain.interval = 8
        assert b"".join(sent) == plain.sse(plain.tokens(0, 200))
    assert len(next_runs) == 8
    assert all(r % 8 == 0 and 8 <= r <= 64 for r in next_runs)
    for turn in turns:  # as a client that went away: billed for what the engine made
        assert turn.job is not None
        turn.job.stream.cancel()
        turn.settle(499)
