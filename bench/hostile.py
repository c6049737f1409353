"""Hostile requests within the size limits, and how long each one freezes the event loop (#28).

A request the gateway accepts by size (``[limits] max_body_bytes``, 16 MiB) can still ask for a
lot of work: a prompt of 15.6 million punctuation tokens, 400,000 content parts, a tool schema
with an enum of a million values. Work like that done on the event loop stalls every other
connection of the process, ``/healthz`` included. This script sends each such request to a real
``fastmode serve`` while a probe thread asks ``GET /healthz`` on its own keep-alive connection
every ``PROBE_S``, and prints per case the answer's status and time and the worst ``/healthz``
latency seen while the case ran (the stall). The target is a worst stall <= 0.5 s.

The bodies are built before a case starts (the client's own work does not overlap the
measurement); each case runs alone, after the previous one's answer. The first rows are the
issue's list, the last ones its small findings (a 400 is the expected answer there).

    python bench/hostile.py                  # start a server, run every case
    python bench/hostile.py --only dots      # cases whose name contains "dots"
    python bench/hostile.py --url http://127.0.0.1:8000   # a server already running
    python bench/hostile.py --slowloris 3000  # 3,000 connections trickling a head instead
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from bench.harness import start_gateway, stop

PROBE_S = 0.01
DOTS = 15_600_000  # "." tokens: the most tokens per byte the tokenizer gives
TIMEOUT_S = 120.0


@dataclass
class Case:
    name: str
    path: str  # an HTTP path, or "ws" for a Responses websocket frame
    body: Callable[[], bytes]
    copies: int = 1  # sent at once, each on its own connection


def _json(value: object) -> Callable[[], bytes]:
    return lambda: orjson.dumps(value)


def _dots(n: int = DOTS) -> str:
    return "." * n


def chat(messages: list[Any], **extra: object) -> dict[str, Any]:
    return {"model": "frontier", "max_tokens": 16, "messages": messages, **extra}


def user(content: object) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


def responses(input_: object, **extra: object) -> dict[str, Any]:
    return {"model": "frontier", "max_output_tokens": 16, "input": input_, **extra}


def messages(msgs: list[Any], **extra: object) -> dict[str, Any]:
    return {"model": "frontier", "max_tokens": 16, "messages": msgs, **extra}


def tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def enum_schema(n: int) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": {"enum": list(range(n))}}}


RECURSIVE = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}

CASES = [
    Case("chat: 15.6 MB of '.'", "/v1/chat/completions", lambda: orjson.dumps(chat(user(_dots())))),
    Case("chat: 15.6 MB of '.', 3 at once", "/v1/chat/completions",
         lambda: orjson.dumps(chat(user(_dots()))), copies=3),
    Case("responses: 15.6 MB of '.'", "/v1/responses",
         lambda: orjson.dumps(responses(_dots()))),
    Case("messages: 15.6 MB of '.'", "/v1/messages",
         lambda: orjson.dumps(messages(user(_dots())))),
    Case("completions: 15.6 MB of '.'", "/v1/completions",
         lambda: orjson.dumps({"model": "frontier", "max_tokens": 16, "prompt": _dots()})),
    Case("websocket: 15.6 MB of '.'", "ws",
         lambda: orjson.dumps({"type": "response.create", **responses(_dots())})),
    Case("chat: 15.6 MB of spaces", "/v1/chat/completions",
         lambda: orjson.dumps(chat(user(" " * DOTS + "a")))),
    Case("responses: 15.6 MB of spaces (stored)", "/v1/responses",
         lambda: orjson.dumps(responses(" " * DOTS + "a"))),
    Case("messages: 15.6 MB of spaces", "/v1/messages",
         lambda: orjson.dumps(messages(user(" " * DOTS + "a")))),
    Case("chat: 2,048 messages of 7 KB", "/v1/chat/completions",
         _json(chat([{"role": "user", "content": _dots(7 * 1024)}] * 2048))),
    Case("chat: 400k content parts", "/v1/chat/completions",
         _json(chat(user([{"type": "text", "text": "."}] * 400_000)))),
    Case("messages: 400k content parts", "/v1/messages",
         _json(messages(user([{"type": "text", "text": "."}] * 400_000)))),
    Case("chat: enum of 1M values (tool)", "/v1/chat/completions",
         _json(chat(user("hi"), tools=[tool("f", enum_schema(1_000_000))]))),
    Case("chat: enum of 1M values (response_format)", "/v1/chat/completions",
         _json(chat(user("hi"), response_format={
             "type": "json_schema", "json_schema": {"name": "e", "schema": enum_schema(1_000_000)}}))),
    Case("chat: 100k tools", "/v1/chat/completions",
         _json(chat(user("hi"), tools=[tool(f"f{i}", {"type": "object"})
                                       for i in range(100_000)]))),
    Case("chat: 5.3M empty arrays in an unknown field", "/v1/chat/completions",
         lambda: orjson.dumps(chat(user("hi"), junk=[[]] * 5_300_000))),
    Case("chat: an object of 1.2M keys in an unknown field", "/v1/chat/completions",
         lambda: orjson.dumps(chat(user("hi"), junk={str(i): 0 for i in range(1_200_000)}))),
    Case("chat: 390k-token prompt (fits the window)", "/v1/chat/completions",
         lambda: orjson.dumps(chat(user(_dots(390_000))))),
    Case("chat: 2,048 messages under the context window", "/v1/chat/completions",
         _json(chat([{"role": "user", "content": "hello there, " * 14}] * 2048))),
    # small requests; each should be a 400
    Case("chat: content part type []", "/v1/chat/completions",
         _json(chat(user([{"type": [], "text": "hi"}])))),
    Case("responses: content part type []", "/v1/responses",
         _json(responses([{"role": "user", "content": [{"type": [], "text": "hi"}]}]))),
    Case("messages: content part type []", "/v1/messages",
         _json(messages(user([{"type": [], "text": "hi"}])))),
    Case("websocket: content part type []", "ws",
         _json({"type": "response.create",
                **responses([{"role": "user", "content": [{"type": [], "text": "hi"}]}])})),
    Case("chat: max_tokens \"64\"", "/v1/chat/completions",
         _json({**chat(user("hi")), "max_tokens": "64"})),
    Case("chat: response_format {$ref: #} required", "/v1/chat/completions",
         _json(chat(user("hi"), response_format={
             "type": "json_schema", "json_schema": {"name": "r", "schema": RECURSIVE}}))),
]


# -- the wire: raw sockets, so no client library's own work is measured -----------------------


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a content-length (or until the server closes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before the head: {data[:80]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while length is None or len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, body


def post(host: str, port: int, path: str, body: bytes) -> tuple[int, bytes]:
    with socket.create_connection((host, port), timeout=TIMEOUT_S) as s:
        s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nhost: x\r\ncontent-type: "
                  b"application/json\r\nconnection: close\r\ncontent-length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        return _read_response(s)


def ws_frame(url: str, body: bytes) -> tuple[int, bytes]:
    """A Responses websocket turn: the first event's status (``error`` events carry one;
    ``response.created`` counts as 200)."""
    from websockets.sync.client import connect

    ws_url = url.replace("http://", "ws://") + "/v1/responses"
    with connect(ws_url, max_size=None, open_timeout=TIMEOUT_S) as ws:
        ws.send(body.decode())
        event = orjson.loads(ws.recv(timeout=TIMEOUT_S))
    return int(event.get("status", 200)) if event.get("type") == "error" else 200, b""


class Probe(threading.Thread):
    """``GET /healthz`` every PROBE_S on one keep-alive connection: (sent at, latency)."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(daemon=True)
        self.host, self.port = host, port
        self.samples: list[tuple[float, float]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        sock = None
        request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
        while not self.stopped.is_set():
            t0 = time.perf_counter()
            try:
                if sock is None:
                    sock = socket.create_connection((self.host, self.port), timeout=TIMEOUT_S)
                sock.sendall(request)
                status, _ = _read_response(sock)
                assert status == 200, status
            except (OSError, ConnectionError):
                if sock is not None:
                    sock.close()
                sock = None
                continue
            t1 = time.perf_counter()
            self.samples.append((t0, t1 - t0))
            time.sleep(max(0.0, PROBE_S - (time.perf_counter() - t1)))

    def worst(self, since: float, until: float) -> float:
        """The longest probe begun in [since, until] (one still pending counts up to now)."""
        return max((lat for t0, lat in self.samples if since <= t0 <= until), default=0.0)


def run_case(case: Case, url: str, probe: Probe) -> tuple[str, int, float, float, float]:
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    body = case.body()
    results: list[tuple[int, bytes] | BaseException] = []

    def send() -> None:
        try:
            results.append(ws_frame(url, body) if case.path == "ws"
                           else post(host, port, case.path, body))
        except BaseException as exc:  # noqa: BLE001 - reported in the table
            results.append(exc)

    time.sleep(0.3)  # the probe's steady state before the case
    t0 = time.perf_counter()
    threads = [threading.Thread(target=send) for _ in range(case.copies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    took = time.perf_counter() - t0
    time.sleep(0.3)  # a probe sent just before the answers ended may still be pending
    stall = probe.worst(t0, time.perf_counter())
    statuses = sorted({r[0] if isinstance(r, tuple) else -1 for r in results})
    errors = [r for r in results if not isinstance(r, tuple)]
    status = ",".join(str(s) for s in statuses) + (f" ({errors[0]!r})" if errors else "")
    return status, len(body), took, stall, 0.0


def slowloris(url: str, n: int, probe: Probe) -> None:
    """``n`` connections from another loopback address (127.0.0.2: a client of its own), each
    sending a request head a header line every 2 s, never its end, held open as long as the
    server lets them; meanwhile a real request from 127.0.0.1. Prints what the server
    answered them and when it closed them, and the /healthz stall."""
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    source = ("127.0.0.2", 0) if host == "127.0.0.1" else None
    socks: list[socket.socket] = []
    failed = 0
    t0 = time.perf_counter()
    for _ in range(n):
        try:
            s = socket.create_connection((host, port), timeout=5, source_address=source)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
            socks.append(s)
        except OSError:
            failed += 1
    opened = time.perf_counter()
    real = post(host, port, "/v1/chat/completions", orjson.dumps(chat(user("hi"))))[0]
    closed_at: dict[int, float] = {}
    answers: dict[bytes, int] = {}
    while len(closed_at) < len(socks) and time.perf_counter() - opened < 180:
        for i, s in enumerate(socks):
            if i in closed_at:
                continue
            try:
                s.sendall(b"x-a: b\r\n")  # one more header line: the head never ends
                s.setblocking(False)
                data = s.recv(65536)
                s.setblocking(True)
            except BlockingIOError:
                s.setblocking(True)
                continue
            except OSError:
                data = b""
            status = data[9:12] if data.startswith(b"HTTP/1.1 ") else b"close"
            answers[status] = answers.get(status, 0) + 1
            closed_at[i] = time.perf_counter() - opened
        time.sleep(2.0)
    for s in socks:
        s.close()
    held = sorted(closed_at.values())
    said = ", ".join(f"{k.decode()}: {v}" for k, v in sorted(answers.items()))
    print(f"slowloris: {n} connections ({failed} failed to connect); a real request meanwhile: "
          f"{real}; the server ended {len(held)} of {len(socks)} ({said}), the last after "
          f"{held[-1] if held else 0:.1f} s; {len(socks) - len(held)} still open at the end; "
          f"worst /healthz {probe.worst(t0, time.perf_counter()):.2f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a gateway already running (default: start one)")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--slowloris", type=int, default=0, metavar="N",
                    help="instead: N connections trickling a head that never ends")
    args = ap.parse_args()
    proc = None
    url = args.url
    if url is None:
        proc, url = start_gateway()
    u = urlsplit(url)
    probe = Probe(u.hostname or "127.0.0.1", u.port or 80)
    probe.start()
    try:
        time.sleep(1.0)
        if args.slowloris:
            slowloris(url, args.slowloris, probe)
            return 0
        idle_since = time.perf_counter()
        time.sleep(1.0)
        print(f"idle: worst /healthz {probe.worst(idle_since, time.perf_counter()) * 1000:.0f} ms"
              f" (probe every {PROBE_S * 1000:.0f} ms)", flush=True)
        print(f"{'case':<48} {'MB':>6} {'status':>12} {'answer s':>9} {'worst /healthz s':>17}")
        worst = 0.0
        for case in CASES:
            if args.only.lower() not in case.name.lower():
                continue
            status, size, took, stall, _ = run_case(case, url, probe)
            worst = max(worst, stall)
            print(f"{case.name:<48} {size / 1e6:6.2f} {status:>12} {took:9.2f} {stall:17.2f}",
                  flush=True)
        print(f"worst /healthz stall over the cases: {worst:.2f} s (target <= 0.5 s)")
    finally:
        probe.stopped.set()
        if proc is not None:
            stop(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
