"""Through a remote tier a client gets what it gets in process: a real fastmode engine
(``quick_server``) and a gateway whose every tier is that engine (``--upstream``), asked the
same requests. The finish reason of a streamed Completion is on its last chunk, as in process;
input token counts are the counts of what the client sent, on every protocol."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import quick_config_text, start_server, stop_server


@pytest.fixture(scope="module")
def tape_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("remote-exact-tapes")


@pytest.fixture(scope="module")
def pair(quick_server: str, tape_dir: Path) -> Iterator[tuple[str, str]]:
    """(the engine in process, the gateway in front of it, recording to ``tape_dir``)."""
    proc, url = start_server("--upstream", quick_server, "--record", str(tape_dir),
                             config_text=quick_config_text(), tmp=tape_dir.parent)
    try:
        yield quick_server, url
    finally:
        stop_server(proc)


def stream_chunks(url: str, route: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream's JSON events (``[DONE]`` checked and left out)."""
    with httpx.stream("POST", url + route, json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [orjson.loads(d) for d in data[:-1]]


def finish_reasons(chunks: list[dict[str, Any]]) -> list[str | None]:
    return [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]


@pytest.mark.parametrize("max_tokens", [30, 400])
def test_a_streamed_completion_ends_with_its_finish_reason_on_the_last_chunk(
        pair: tuple[str, str], max_tokens: int) -> None:
    engine, gateway = pair
    body = {"model": "frontier", "prompt": "The KV cache", "max_tokens": max_tokens, "seed": 2,
            "stream": True, "stream_options": {"include_usage": True}}
    here, there = (finish_reasons(stream_chunks(u, "/v1/completions", body))
                   for u in (engine, gateway))
    truth = here[-1]
    assert truth in ("length", "stop") and here[:-1] == [None] * (len(here) - 1)
    assert there[-1] == truth, there[:3]
    assert there[:-1] == [None] * (len(there) - 1), there[:3]
    whole = httpx.post(gateway + "/v1/completions", json={
        k: v for k, v in body.items() if k not in ("stream", "stream_options")}).json()
    assert whole["choices"][0]["finish_reason"] == truth


WEATHER = {"name": "get_weather", "description": "The weather of a city, now",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
USER = [{"role": "user", "content": "Once upon a time, in Lyon"}]
# one request of each protocol, whole and streamed: (name, route, body, input count's path)
ASKED: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
    ("completions", "/v1/completions", {"model": "frontier", "prompt": "Once upon a time",
                                        "max_tokens": 5, "seed": 3}, ("prompt_tokens",)),
    ("messages", "/v1/messages", {"model": "frontier", "max_tokens": 5, "messages": USER,
                                  "system": "You are terse.", "tools": [WEATHER]},
     ("input_tokens",)),
    ("chat", "/v1/chat/completions", {"model": "frontier", "max_tokens": 5, "messages": USER,
                                      "seed": 3}, ("prompt_tokens",)),
    ("responses", "/v1/responses", {"model": "frontier", "max_output_tokens": 5,
                                    "input": "Once upon a time, in Lyon"}, ("input_tokens",)),
]


def input_count(url: str, route: str, body: dict[str, Any], stream: bool) -> int:
    """The input tokens the client is told (a stream's last usage)."""
    if not stream:
        r = httpx.post(url + route, json=body, timeout=30)
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        return int(usage.get("prompt_tokens", usage.get("input_tokens")))
    extra = {} if "messages" in route and "chat" not in route or "responses" in route else {
        "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + route, json={**body, "stream": True, **extra},
                      timeout=30) as r:
        assert r.status_code == 200, r.read()
        events = [orjson.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    counts = []
    for e in events:
        for usage in (e.get("usage"), (e.get("message") or {}).get("usage"),
                      (e.get("response") or {}).get("usage")):
            if isinstance(usage, dict):
                n = usage.get("prompt_tokens", usage.get("input_tokens"))
                if n is not None:
                    counts.append(int(n))
    assert counts, events[-2:]
    assert len(set(counts)) == 1, counts  # a stream never changes its count on the way
    return counts[-1]


def counts(url: str) -> dict[str, int]:
    return {f"{name}{'-stream' if stream else ''}": input_count(url, route, body, stream)
            for name, route, body, _ in ASKED for stream in (False, True)}


def test_input_counts_are_what_the_client_sent_on_every_path(
        pair: tuple[str, str], tape_dir: Path) -> None:
    engine, gateway = pair
    here = counts(engine)
    assert counts(gateway) == here
    for timing in ("recorded", "none", "modeled", "tier:fast"):
        proc, url = start_server("--replay", str(tape_dir), "--replay-timing", timing,
                                 config_text=quick_config_text(), tmp=tape_dir.parent)
        try:
            assert counts(url) == here, timing
        finally:
            stop_server(proc)
