"""A recorded exchange's cassette line is written before the client gets the stream's last
event: checked at the moment the gateway hands that event to the transport (an ASGI ``send``
that reads the cassette directory when the last event goes out), on every streamed protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import started_app

HI = [{"role": "user", "content": "Tell me about caches"}]
# (route, body, what the stream's last event holds)
STREAMS = {
    "chat": ("/v1/chat/completions", {"model": "frontier", "messages": HI, "max_tokens": 6,
                                      "stream": True}, b"[DONE]"),
    "completions": ("/v1/completions", {"model": "frontier", "prompt": "Caches", "max_tokens": 6,
                                        "stream": True}, b"[DONE]"),
    "responses": ("/v1/responses", {"model": "frontier", "input": "Caches",
                                    "max_output_tokens": 6, "stream": True},
                  b"event: response.incomplete"),  # cut at max_output_tokens
    "messages": ("/v1/messages", {"model": "frontier", "messages": HI, "max_tokens": 6,
                                  "stream": True}, b"message_stop"),
}


@pytest.fixture
async def recording(tmp_path: Path) -> AsyncIterator[tuple[Any, Path]]:
    tapes = tmp_path / "tapes"
    async with started_app(tmp_path, f'[record]\ndir = "{tapes}"\n') as app:
        yield app, tapes


def recorded_ids(tapes: Path) -> list[str]:
    return [orjson.loads(line)["id"] for f in sorted(tapes.glob("*.jsonl"))
            for line in f.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize("name", list(STREAMS))
async def test_the_line_is_in_the_cassette_before_the_last_event_goes(
        recording: tuple[Any, Path], name: str) -> None:
    app, tapes = recording
    route, body, last = STREAMS[name]
    at_the_end: list[list[str]] = []

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        async def spy(message: Any) -> None:
            if message["type"] == "http.response.body" and last in message.get("body", b""):
                at_the_end.append(recorded_ids(tapes))  # what a reader finds right now
            await send(message)

        await app(scope, receive, spy)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=watched),
                                 base_url="http://t") as c:
        r = await c.post(route, json=body)
    assert r.status_code == 200 and last in r.content
    assert len(at_the_end) == 1
    assert len(at_the_end[0]) == 1, at_the_end  # this exchange's line, already there
    assert recorded_ids(tapes) == at_the_end[0]
