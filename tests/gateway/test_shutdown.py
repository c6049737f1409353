"""Graceful shutdown (gateway.shutdown): on SIGTERM, streams in flight get their end within the
grace period — a proper error event on HTTP and on the websocket — the ledger is flushed, and
the process exits 0 with no traceback."""

from __future__ import annotations

import json
import signal
import sqlite3
import tempfile
import threading
import time

import httpx
from configs import with_keys
from test_openai_sdk import USER
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect


def test_sigterm_ends_every_stream_properly_and_exits_0(tmp_path) -> None:
    from conftest import launch

    ledger = tmp_path / "ledger.sqlite3"
    log = tempfile.TemporaryFile()
    proc, url = launch("--ledger", str(ledger), "--log-level", "info", log=log,
                       config_text=with_keys(shutdown_grace_s=1), tmp=tmp_path)
    try:
        sse: dict[str, list[str]] = {"long": [], "short": []}
        errors: dict[str, BaseException] = {}
        ws_events: list[dict] = []
        ws_close: list[int | None] = []

        def stream(name: str, tokens: int) -> None:
            try:
                with httpx.stream("POST", url + "/v1/chat/completions", timeout=30, json={
                        "model": "frontier", "messages": USER, "max_tokens": tokens,
                        "stream": True, "ignore_eos": True}) as r:
                    for line in r.iter_lines():
                        sse[name].append(line)
            except BaseException as exc:  # noqa: BLE001 - reported by the asserts below
                errors[name] = exc

        def websocket() -> None:
            with connect(url.replace("http", "ws") + "/v1/responses") as ws:
                ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                    "input": "Write a long essay.", "max_output_tokens": 3000,
                                    "ignore_eos": True}))
                try:
                    while True:
                        ws_events.append(json.loads(ws.recv(timeout=30)))
                except ConnectionClosed as exc:
                    ws_close.append(exc.rcvd.code if exc.rcvd else None)

        threads = [threading.Thread(target=stream, args=("long", 3000), daemon=True),
                   threading.Thread(target=websocket, daemon=True)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while (len(sse["long"]) < 10 or len(ws_events) < 10) and time.monotonic() < deadline:
            time.sleep(0.02)
        short = threading.Thread(target=stream, args=("short", 25), daemon=True)
        short.start()
        while not sse["short"] and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert proc.wait(15) == 0
        assert time.monotonic() - signalled < 1 + 6  # the grace period plus uvicorn's margin
        for t in [*threads, short]:
            t.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
    log.seek(0)
    text = log.read().decode()
    assert "Traceback" not in text, text[-3000:]
    assert not errors, errors
    # the short stream finished within the grace period
    assert [line for line in sse["short"] if line.startswith("data: ")][-1] == "data: [DONE]"
    # the long one ended with OpenAI's in-stream error, and a complete HTTP body
    last = json.loads([line for line in sse["long"] if line.startswith("data: ")][-1][6:])
    assert last["error"]["code"] == "server_shutting_down"
    # the websocket turn got its terminal event, then the socket closed with 1001
    assert ws_events[-1]["type"] == "response.failed"
    assert ws_events[-1]["response"]["error"]["code"] == "server_shutting_down"
    assert ws_close == [1001]
    with sqlite3.connect(ledger) as db:
        ended = dict(db.execute("SELECT ended, COUNT(*) FROM usage GROUP BY ended").fetchall())
    assert ended == {"completed": 1, "shutdown": 2}
    # nothing listens any more
    try:
        httpx.get(url + "/healthz", timeout=1)
        raise AssertionError("still serving")
    except httpx.ConnectError:
        pass


def test_readyz_answers_503_on_new_connections_during_the_drain(tmp_path) -> None:
    """A load balancer probing /readyz during the drain gets 503 (not a refused connection),
    and a new model request the protocol's 503; the process still exits 0 at the end."""
    from conftest import launch

    proc, url = launch(config_text=with_keys(shutdown_grace_s=3), tmp=tmp_path)
    lines: list[str] = []

    def stream() -> None:
        with httpx.stream("POST", url + "/v1/chat/completions", timeout=30, json={
                "model": "frontier", "messages": USER, "max_tokens": 3000, "stream": True,
                "ignore_eos": True}) as r:
            lines.extend(r.iter_lines())

    t = threading.Thread(target=stream, daemon=True)
    try:
        t.start()
        deadline = time.monotonic() + 20
        while len(lines) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        ready = None
        while time.monotonic() < deadline:  # the signal is handled within a loop tick
            with httpx.Client(timeout=2) as fresh:  # a new connection each time
                ready = fresh.get(url + "/readyz")
            if ready.status_code == 503:
                break
            time.sleep(0.02)
        assert ready is not None and ready.status_code == 503, ready
        assert ready.json()["status"] == "shutting_down"
        with httpx.Client(timeout=5) as fresh:
            r = fresh.post(url + "/v1/chat/completions", json={
                "model": "frontier", "messages": USER, "max_tokens": 3})
        assert r.status_code == 503 and r.json()["error"]["code"] == "server_shutting_down"
        assert proc.wait(15) == 0
        t.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
