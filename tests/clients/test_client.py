"""The client library and ``fastmode chat`` against a live server, over both transports."""

from __future__ import annotations

import json

import pytest

from fastmode.cli import main

# submodules, not the package: under pytest, tests/clients shadows the `clients` package name
from fastmode.clients.client import Client, tier_url
from fastmode.clients.event_parsers import ChatParser, ResponsesParser
from fastmode.clients.events import Done, Error, TextDelta, ToolCallDelta, Usage

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}
TRANSPORTS = [
    pytest.param({"transport": "http"}, id="http-chat"),
    pytest.param({"transport": "http", "api": "responses"}, id="http-responses"),
    pytest.param({"transport": "ws"}, id="ws"),
]


# -- parsing, no server -------------------------------------------------------------------


def test_chat_parser() -> None:
    p = ChatParser()
    chunk = {"id": "c1", "model": "m", "service_tier": "default", "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    assert p.feed(chunk, 1.0) == []
    chunk["choices"][0]["delta"] = {"content": "Hi"}
    assert p.feed(chunk, 2.0) == [TextDelta("Hi", 2.0)]
    chunk["choices"][0]["delta"] = {"tool_calls": [{"index": 0, "id": "call_1", "type":
                                    "function", "function": {"name": "f", "arguments": "{"}}]}
    assert p.feed(chunk, 3.0) == [ToolCallDelta(0, "{", 3.0, "call_1", "f")]
    chunk["choices"][0].update(delta={}, finish_reason="tool_calls")
    assert p.feed(chunk, 4.0) == []
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "cost_usd": 0.5,
             "prompt_tokens_details": {"cached_tokens": 2}}
    assert p.feed({"choices": [], "usage": usage}, 5.0) == [Usage(9, 3, 2, 5.0, 0.5)]
    assert p.done(6.0) == Done("tool_calls", 6.0, "c1", "m", "default", None)
    err = p.feed({"error": {"message": "boom", "type": "server_error"}}, 7.0)
    assert err == [Error("boom", 7.0, type="server_error")]


def test_responses_parser() -> None:
    p = ResponsesParser()
    assert p.feed({"type": "response.created", "response": {}}, 1.0) == []
    assert p.feed({"type": "response.output_text.delta", "delta": "a"}, 2.0) == \
        [TextDelta("a", 2.0)]
    assert p.feed({"type": "response.output_item.added", "output_index": 1, "item": {
        "type": "function_call", "call_id": "call_9", "name": "g", "arguments": ""}}, 3.0) == []
    assert p.feed({"type": "response.function_call_arguments.delta", "output_index": 1,
                   "delta": "{}"}, 3.0) == [ToolCallDelta(1, "{}", 3.0, "call_9", "g")]
    assert p.feed({"type": "response.function_call_arguments.delta", "output_index": 1,
                   "delta": " "}, 3.5) == [ToolCallDelta(1, " ", 3.5)]
    assert not p.finished
    done = p.feed({"type": "response.incomplete", "response": {
        "id": "resp_1", "model": "m", "status": "incomplete", "service_tier": "priority",
        "incomplete_details": {"reason": "max_output_tokens"},
        "usage": {"input_tokens": 4, "output_tokens": 2, "cost_usd": 0.1,
                  "input_tokens_details": {"cached_tokens": 1}}}}, 4.0)
    assert done == [Usage(4, 2, 1, 4.0, 0.1),
                    Done("max_output_tokens", 4.0, "resp_1", "m", "priority", None)]
    assert p.finished
    q = ResponsesParser()
    assert q.feed({"type": "error", "status": 429, "error": {
        "message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}, 1.0) == \
        [Error("slow down", 1.0, 429, "requests", "rate_limit_exceeded")]
    assert q.finished


def test_tier_urls() -> None:
    assert tier_url("http://h:1/", "standard") == ("http://h:1/v1", "frontier")
    assert tier_url("http://h:1", "fast") == ("http://h:1/fast/v1", "frontier")
    assert tier_url("http://h:1", "spark") == ("http://h:1/v1", "frontier-spark")
    assert Client("https://h/v1", transport="ws").ws_url == "wss://h/v1/responses"
    with pytest.raises(ValueError):
        Client(transport="grpc")  # type: ignore[arg-type]


# -- against the server -------------------------------------------------------------------


@pytest.mark.parametrize("kw", TRANSPORTS)
async def test_text_turn_summary(live_server: str, kw: dict) -> None:
    async with Client(live_server + "/v1", **kw) as c:
        stream = c.stream("Explain continuous batching.", model="frontier-spark",
                          max_tokens=40, seed=3)
        events = [e async for e in stream]
    s = stream.summary
    assert isinstance(events[-1], Done)
    assert any(isinstance(e, Usage) for e in events)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert s.text == "".join(d.text for d in deltas) and s.text
    times = [e.t for e in events]
    assert times == sorted(times)  # client-side timestamps, in arrival order
    assert s.tokens == 40 and s.output_tokens == 40
    assert s.input_tokens and s.input_tokens > 0
    assert s.cost_usd and s.cost_usd > 0
    assert s.ttft_s is not None and s.ttft_s > 0
    assert s.tokens_per_s is not None and s.tokens_per_s > 0
    assert s.tier == ("default" if kw["transport"] == "ws" else "spark")
    assert s.finish_reason in ("length", "max_output_tokens")
    line = s.line()
    assert "TTFT" in line and "tok/s" in line and "40 tokens" in line
    shown = line.split("$", 1)[1].split(" ", 1)[0]  # the server's number, every digit of it
    assert float(shown) == s.cost_usd and len(shown.partition(".")[2]) == 9, shown


@pytest.mark.parametrize("kw", TRANSPORTS)
async def test_tool_call_turn(live_server: str, kw: dict) -> None:
    async with Client(live_server + "/v1", **kw) as c:
        s = await c.complete("What is the weather in Lyon?", model="frontier", tools=[WEATHER],
                             seed=2)
        assert s.finish_reason in ("tool_calls", "completed")
        call = s.tool_calls[0]
        assert call.name == "get_weather" and call.id
        assert "city" in json.loads(call.arguments)
        if c.api == "responses":
            out = await c.complete(
                [{"type": "function_call_output", "call_id": call.id, "output": "sunny"}],
                model="frontier", tools=[WEATHER], previous_response_id=s.response_id,
                max_tokens=10)
            assert out.text and out.cached_tokens == s.input_tokens + s.output_tokens


async def test_websocket_session_continues_with_cached_tokens(live_server: str) -> None:
    async with Client(live_server + "/v1", transport="ws") as c:
        assert await c.connect() > 0
        prev, context = None, 0
        for i in range(5):
            s = await c.complete(f"step {i}", model="frontier-spark", max_tokens=10,
                                 previous_response_id=prev)
            assert s.error is None and s.connect_s == 0  # warm socket: no connect
            assert s.cached_tokens == context
            context = (s.input_tokens or 0) + s.tokens
            prev = s.response_id


async def test_breaking_off_a_websocket_turn_keeps_the_socket_usable(live_server: str) -> None:
    async with Client(live_server + "/v1", transport="ws") as c:
        stream = c.stream("A long answer please", model="frontier", max_tokens=2000)
        async with stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    break  # the client cancels the response and skips its remaining events
        s = await c.complete("short", model="frontier-spark", max_tokens=5)
        assert s.error is None and s.tokens == 5


@pytest.mark.parametrize("kw", TRANSPORTS)
async def test_errors_are_events(live_server: str, kw: dict) -> None:
    async with Client(live_server + "/v1", **kw) as c:
        s = await c.complete("hi", model="no-such-model")
        assert s.error is not None
        assert s.error.status == 404 and s.error.code == "model_not_found"
        s = await c.complete("hi", model="frontier-spark", max_tokens=3)  # still usable
        assert s.error is None and s.tokens == 3
    async with Client("http://127.0.0.1:1/v1", **kw) as c:
        s = await c.complete("hi", model="frontier")
        assert s.error is not None and s.error.code == "connection_error"


# -- fastmode chat ------------------------------------------------------------------------


@pytest.mark.parametrize("ws", [False, True])
@pytest.mark.parametrize("tier", ["standard", "fast", "spark"])
def test_fastmode_chat(live_server: str, capsys, tier: str, ws: bool) -> None:
    # not a greeting: a greeting's reply is a single line, shorter than the cap
    argv = ["chat", "--url", live_server, "--tier", tier, "--max-tokens", "12", "Explain",
            "batching"]
    rc = main(argv + (["--ws"] if ws else []))
    out, err = capsys.readouterr()
    assert rc == 0
    assert out.strip()
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("TTFT ") and "tok/s" in summary and "12 tokens" in summary
    assert "$" in summary and f"tier {tier}" in summary


def test_fastmode_chat_error(live_server: str, capsys) -> None:
    assert main(["chat", "--url", live_server, "--model", "nope", "hi"]) == 1
    assert "model_not_found" in capsys.readouterr().err
    assert main(["chat", "--max-tokens", "0", "hi"]) == 2
