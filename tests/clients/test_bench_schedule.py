"""The pacing benchmark's bare reference replays fastmode's seating: streams start when told."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.bare_asgi import start_delay
from bench.harness import ROOT, free_port, stop, wait_healthy
from bench.pacing import CHAT
from bench.seating import first_tokens, held_paths, mean_active
from bench.stream_client import stream


def _result(t_send: float, reads: list[float]) -> dict[str, Any]:
    return {"t_send": t_send, "series": [(t, 1) for t in reads], "info": {}, "tokens": len(reads)}


def test_first_tokens_are_the_delays_after_each_request_in_order() -> None:
    results = [_result(10.0, [10.5, 11.0]), _result(10.0, [10.1]), _result(3.0, [])]
    assert first_tokens(results) == pytest.approx([0.1, 0.5])  # a stream with no token: none


def test_held_paths_give_each_stream_fastmode_served_its_delay_and_none_without_a_schedule() -> None:
    assert held_paths("/long", None, 2) == ["/long", "/long"]
    assert held_paths("/long", [], 1) == ["/long"]
    assert held_paths("/long", [0.25, 1.5], 3) == [  # fastmode served two of three
        "/long?after=0.250000", "/long?after=1.500000"]


def test_mean_active_is_the_streams_streaming_at_once() -> None:
    both = [_result(0.0, [0.0, 2.0]), _result(0.0, [1.0, 3.0])]  # 4 s of streams over 3 s
    assert mean_active(both) == pytest.approx(4 / 3)
    assert mean_active([_result(0.0, [])]) == 0.0


def test_the_after_parameter_is_read_from_the_query_string() -> None:
    assert start_delay({"query_string": b"x=1&after=0.75"}) == 0.75
    assert start_delay({"query_string": b""}) == 0.0
    assert start_delay({}) == 0.0
    assert start_delay({"query_string": b"after=-3"}) == 0.0


def _capture(tokens: int) -> dict[str, Any]:
    def chunk(body: dict[str, Any]) -> str:
        return "data: " + orjson.dumps(body).decode() + "\n\n"

    events = [chunk({"choices": [{"index": 0, "delta": {"content": "tok "}}]})
              for _ in range(tokens)]
    closing = chunk({"choices": [], "usage": {"completion_tokens": tokens}}) + "data: [DONE]\n\n"
    return {"opening": "", "events": events, "closing": closing, "tokens": tokens,
            "interval": 1}


def test_the_bare_app_holds_a_stream_as_long_as_asked(tmp_path: Path) -> None:
    assert CHAT.marker in _capture(1)["events"][0].encode()  # the client counts these events
    path = tmp_path / "captures.json"
    path.write_bytes(orjson.dumps({"long": _capture(20)}))
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench/bare_asgi.py"), str(port),
                             str(path), "0.001"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_healthy(port, proc)

        async def first_token(p: str) -> float:
            r = await stream(port, CHAT, "hi", 20, p)
            assert r["tokens"] == 20
            return float(first_tokens([r])[0])

        plain = asyncio.run(first_token("/long"))
        held = asyncio.run(first_token("/long?after=0.4"))
        assert held >= 0.4
        assert held - plain >= 0.3
    finally:
        stop(proc)
