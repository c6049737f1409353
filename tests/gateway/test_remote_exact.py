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
def pair(quick_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[str, str]]:
    """(the engine in process, the gateway in front of it)."""
    tmp: Path = tmp_path_factory.mktemp("remote-exact")
    proc, url = start_server("--upstream", quick_server, config_text=quick_config_text(),
                             tmp=tmp)
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
