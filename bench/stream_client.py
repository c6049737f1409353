"""Raw-socket streaming clients for ``gateway_overhead.py``: cheap enough to read thousands of
streams on one core.

No HTTP or websocket library on the hot path: a stream is read in 64 KiB pieces and its token
events are counted with ``bytes.count`` of a marker that only token events carry (server frames
are unmasked, so websocket payloads are plain in the byte stream too). The closing events are
parsed at the end for the modeled ``time_info`` and the usage. ``capture`` reads one stream
whole and splits it into events, for the bare reference to replay.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

MODEL = "frontier-spark"
READ = 65536


@dataclass(frozen=True)
class Proto:
    label: str
    path: str
    ws: bool
    marker: bytes  # in every token event and in no other event
    body: Callable[[str, int], dict[str, Any]]
    final: Callable[[list[dict[str, Any]]], tuple[dict[str, Any], int]]  # time_info, tokens


def chat_final(events: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    info: dict[str, Any] = next((e["time_info"] for e in events if "time_info" in e), {})
    usage: dict[str, Any] = next((e["usage"] for e in events if e.get("usage")), {})
    return info, usage.get("completion_tokens", 0)


def _responses_final(events: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    for e in events:
        if e.get("type") in ("response.completed", "response.incomplete"):
            r = e["response"]
            return r.get("time_info") or {}, (r.get("usage") or {}).get("output_tokens", 0)
    return {}, 0


def _messages_final(events: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    for e in events:
        if e.get("type") == "message_delta":
            return e.get("time_info") or {}, e["usage"]["output_tokens"]
    return {}, 0


def user_messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


PROTOCOLS: dict[str, Proto] = {
    "chat": Proto("Chat SSE", "/v1/chat/completions", False, b'"delta":{"content":',
                  lambda p, n: {"model": MODEL, "stream": True, "max_tokens": n,
                                "stream_options": {"include_usage": True},
                                "messages": user_messages(p)}, chat_final),
    "responses": Proto("Responses SSE", "/v1/responses", False,
                       b'"type":"response.output_text.delta"',
                       lambda p, n: {"model": MODEL, "stream": True, "max_output_tokens": n,
                                     "input": p}, _responses_final),
    "responses-ws": Proto("Responses websocket", "/v1/responses", True,
                          b'"type":"response.output_text.delta"',
                          lambda p, n: {"type": "response.create", "model": MODEL,
                                        "max_output_tokens": n, "input": p}, _responses_final),
    "messages": Proto("Anthropic SSE", "/v1/messages", False, b'"type":"text_delta"',
                      lambda p, n: {"model": MODEL, "stream": True, "max_tokens": n,
                                    "messages": user_messages(p)}, _messages_final),
}
WS_END = (b'{"type":"response.completed"', b'{"type":"response.incomplete"',
          b'{"type":"response.failed"', b'{"type":"error"')  # how a terminal event begins


def _post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
            f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body


def _ws_frame(payload: bytes) -> bytes:
    """A masked text frame (clients must mask); a zero mask key leaves the payload as it is."""
    n = len(payload)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 65536:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


async def _open_ws(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   path: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(f"GET {path} HTTP/1.1\r\nhost: bench\r\nupgrade: websocket\r\nconnection: "
                 f"Upgrade\r\nsec-websocket-key: {key}\r\nsec-websocket-version: 13\r\n\r\n"
                 .encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = await reader.read(READ)
        if not data:
            raise ConnectionError("websocket upgrade refused")
        head += data
    status, rest = head.split(b"\r\n\r\n", 1)
    if b" 101 " not in status.split(b"\r\n", 1)[0]:
        raise ConnectionError(status.split(b"\r\n", 1)[0].decode())
    return rest


def _sse_events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for line in raw.split(b"\n"):
        line = line.rstrip(b"\r")
        if line.startswith(b"data: {"):
            try:
                out.append(orjson.loads(line[6:]))
            except orjson.JSONDecodeError:
                pass  # a line cut by the start of the kept tail
    return out


def _ws_frames(raw: bytes) -> list[bytes]:
    """Unmasked server frames, whole ones only (text payloads)."""
    out, i = [], 0
    while i + 2 <= len(raw):
        n, j = raw[i + 1] & 0x7F, i + 2
        if n == 126:
            n, j = int.from_bytes(raw[j:j + 2], "big"), j + 2
        elif n == 127:
            n, j = int.from_bytes(raw[j:j + 8], "big"), j + 8
        if j + n > len(raw):
            break
        out.append(raw[j:j + n])
        i = j + n
    return out


def _ws_last(raw: bytes) -> list[dict[str, Any]]:
    """The last event of a websocket byte stream that ends with a whole frame."""
    for end in WS_END:
        p = raw.rfind(end)
        if p >= 0:
            try:
                return [orjson.loads(raw[p:])]
            except orjson.JSONDecodeError:
                return []
    return []


CHUNKED_END = b"\r\n0\r\n\r\n"  # a chunked body's terminating chunk


class _Reader(asyncio.Protocol):
    """Counts token events as bytes arrive: no task wake-up per read, one callback."""

    def __init__(self, proto: Proto, request: bytes, done: asyncio.Future[None]) -> None:
        self.proto, self.request, self.done = proto, request, done
        self.marker, self.overlap = proto.marker, len(proto.marker) - 1
        self.ws_head = proto.ws  # a websocket waits for its 101 before it sends the request
        self.head = b""
        self.tail = self.end_tail = b""
        self.kept: deque[bytes] = deque(maxlen=64)
        self.series: list[tuple[float, int]] = []
        self.t_send = 0.0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.proto.ws:
            key = base64.b64encode(os.urandom(16)).decode()
            transport.write(  # type: ignore[attr-defined]
                f"GET {self.request.decode()} HTTP/1.1\r\nhost: bench\r\nupgrade: websocket"
                f"\r\nconnection: Upgrade\r\nsec-websocket-key: {key}\r\n"
                "sec-websocket-version: 13\r\n\r\n".encode())
        else:
            self.t_send = time.perf_counter()
            transport.write(self.request)  # type: ignore[attr-defined]

    def send_ws(self, body: bytes) -> None:
        self.t_send = time.perf_counter()
        assert self.transport is not None
        self.transport.write(_ws_frame(body))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.ws_head:
            self.head += data
            if b"\r\n\r\n" not in self.head:
                return
            status, data = self.head.split(b"\r\n\r\n", 1)
            if b" 101 " not in status.split(b"\r\n", 1)[0]:
                self.finish(ConnectionError(status.split(b"\r\n", 1)[0].decode()))
                return
            self.ws_head = False
            self.send_ws(self.ws_body)
            if not data:
                return
        buf = self.tail + data
        c = buf.count(self.marker)
        if c:
            self.series.append((now, c))
        self.tail = buf[-self.overlap:]
        self.kept.append(data)
        seen = self.end_tail + data
        self.end_tail = seen[-64:]
        if self.proto.ws:
            if any(e in seen for e in WS_END) and _ws_last(b"".join(self.kept)):
                self.finish(None)
        elif seen.endswith(CHUNKED_END):  # the body's last chunk: done, whether or not the
            self.finish(None)  # server closes (one that keeps the connection open: aimock)

    def connection_lost(self, exc: Exception | None) -> None:
        self.finish(exc)

    def finish(self, exc: BaseException | None) -> None:
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
        if self.transport is not None and not self.transport.is_closing():
            if self.proto.ws:
                self.transport.write(b"\x88\x80\0\0\0\0")  # close
            self.transport.close()

    ws_body = b""


async def stream(port: int, proto: Proto, prompt: str, tokens: int,
                 path: str | None = None) -> dict[str, Any]:
    """One stream: (arrival time, token events) per read, the modeled time_info and the tokens
    the server reported."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    body = orjson.dumps(proto.body(prompt, tokens))
    path = path or proto.path
    request = path.encode() if proto.ws else _post(path, body)
    r = _Reader(proto, request, done)
    r.ws_body = body
    transport, _ = await loop.create_connection(lambda: r, "127.0.0.1", port)
    try:
        await done
    finally:
        transport.close()
    raw = b"".join(r.kept)
    info, n = proto.final(_ws_last(raw) if proto.ws else _sse_events(raw))
    return {"t_send": r.t_send, "series": r.series, "info": info, "tokens": n}


def _dechunk(body: bytes) -> bytes:
    out, i = bytearray(), 0
    while True:
        j = body.index(b"\r\n", i)
        size = int(body[i:j], 16)
        if size == 0:
            return bytes(out)
        out += body[j + 2:j + 2 + size]
        i = j + 2 + size + 2


async def capture(port: int, proto: Proto, prompt: str, tokens: int,
                  interval: int) -> dict[str, Any]:
    """One whole stream, split into opening events, token events and closing events."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = orjson.dumps(proto.body(prompt, tokens))
    raw = b""
    try:
        if proto.ws:
            raw = await _open_ws(reader, writer, proto.path)
            writer.write(_ws_frame(body))
            while not _ws_last(raw):
                raw += await asyncio.wait_for(reader.read(READ), 30)
            events = [f.decode() for f in _ws_frames(raw)]
            sep = "\n"
        else:
            writer.write(_post(proto.path, body))
            while data := await asyncio.wait_for(reader.read(READ), 30):
                raw += data
            text = _dechunk(raw.split(b"\r\n\r\n", 1)[1]).decode()
            events = [e + "\n\n" for e in text.split("\n\n") if e]
            sep = ""
    finally:
        writer.close()
    marker = proto.marker.decode()
    idx = [i for i, e in enumerate(events) if marker in e]
    first, last = idx[0], idx[-1]
    parsed = ([orjson.loads(e) for e in events[last + 1:]] if proto.ws
              else _sse_events("".join(events[last + 1:]).encode()))
    info, n = proto.final(parsed)
    return {"opening": sep.join(events[:first]) + (sep if first and sep else ""),
            "events": events[first:last + 1],
            "closing": sep.join(events[last + 1:]) + (sep if sep else ""),
            "tokens": n, "interval": interval,  # the model's pace, without host lag
            "itl": (info["completion_time"] - info.get("completion_host_lag_time", 0.0))
            / max(n - 1, 1)}
