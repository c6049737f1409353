"""The Responses API WebSocket mode against a real server (websockets client and the SDK)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import openai
import pytest
import websockets
from websockets.exceptions import ConnectionClosed, InvalidStatus

from fastmode.gateway.config import default_config_text
from fastmode.gateway.websocket import MAX_FRAME_BYTES

TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}
KEY = "sk-fastmode-ws-test"


def ws_url(base: str, prefix: str = "/v1") -> str:
    return base.replace("http://", "ws://") + prefix + "/responses"


async def connect(base: str, prefix: str = "/v1", **kw: Any):
    return await websockets.connect(ws_url(base, prefix), compression=None, **kw)


async def recv(ws) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), 30))


async def until_terminal(ws) -> list[dict[str, Any]]:
    events = []
    while True:
        ev = await recv(ws)
        events.append(ev)
        if ev["type"] in TERMINAL:
            return events


async def turn(ws, **body: Any) -> list[dict[str, Any]]:
    await ws.send(json.dumps({"type": "response.create", **body}))
    return await until_terminal(ws)


async def metric(base: str, name: str, **labels: str) -> float:
    async with httpx.AsyncClient() as c:
        text = (await c.get(base + "/metrics")).text
    total = 0.0
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(
            f'{k}="{v}"' in line for k, v in labels.items()
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def wait_for_metric(base: str, name: str, want: float, **labels: str) -> float:
    """Poll until the metric reaches ``want`` (a condition, not a timing assert)."""
    value = None
    for _ in range(200):
        value = await metric(base, name, **labels)
        if value == want:
            return value
        await asyncio.sleep(0.02)
    return value  # type: ignore[return-value]


def config_text(**server: Any) -> str:
    text = default_config_text()
    for key, value in server.items():
        text, n = re.subn(rf"(?m)^{key} = \S+", f"{key} = {value}", text)
        assert n == 1, key
    return text


# -- turns --------------------------------------------------------------------------------


async def test_many_sequential_turns_on_one_socket(live_server: str) -> None:
    async with await connect(live_server) as ws:
        ids = set()
        for i in range(12):
            events = await turn(ws, model="frontier-spark", input=f"Turn {i}: say something",
                                max_output_tokens=15, seed=i)
            assert events[0]["type"] == "response.created"
            assert events[1]["type"] == "response.in_progress"
            assert events[-1]["type"] in ("response.completed", "response.incomplete")
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
            resp = events[-1]["response"]
            text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
            assert text == resp["output"][0]["content"][0]["text"]
            assert resp["usage"]["output_tokens"] == 15
            assert resp["time_info"]["network_time"] == 0.0  # no emulation by default
            ids.add(resp["id"])
        assert len(ids) == 12


async def test_same_events_as_the_sse_stream(live_server: str) -> None:
    body = {"model": "frontier", "input": "Describe a batch scheduler.", "max_output_tokens": 25,
            "seed": 11, "temperature": 0}
    sse: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=30) as c:
        async with c.stream("POST", live_server + "/v1/responses",
                            json={**body, "stream": True}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    sse.append(json.loads(line[6:]))
    async with await connect(live_server) as ws:
        frames = await turn(ws, **body)

    def shape(events: list[dict[str, Any]]) -> list[tuple[str, Any]]:
        return [(e["type"], e.get("delta")) for e in events]

    assert shape(frames) == shape(sse)
    assert frames[-1]["response"]["usage"] == sse[-1]["response"]["usage"]


async def test_fast_path_and_tool_call_turns(live_server: str) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    async with await connect(live_server, "/fast/v1") as ws:
        events = await turn(ws, model="frontier", input="What is the weather in Lyon?",
                            tools=[tool], seed=1)
        done = events[-1]["response"]
        assert done["service_tier"] == "priority"
        call = done["output"][0]
        assert call["type"] == "function_call" and call["name"] == "get_weather"
        args = "".join(e["delta"] for e in events
                       if e["type"] == "response.function_call_arguments.delta")
        assert json.loads(args) == json.loads(call["arguments"])
        # the agent loop: send the tool's output back on the same socket
        events = await turn(ws, model="frontier", previous_response_id=done["id"], tools=[tool],
                            input=[{"type": "function_call_output", "call_id": call["call_id"],
                                    "output": '{"temp_c": 21}'}], max_output_tokens=20)
        resp = events[-1]["response"]
        assert resp["output"][0]["type"] == "message"
        assert resp["usage"]["input_tokens_details"]["cached_tokens"] == \
            done["usage"]["input_tokens"] + done["usage"]["output_tokens"]


def modeled_prompt_time(response: dict) -> float:
    """``prompt_time`` without the host's lag in it (the lag outside completion_time)."""
    info = response["time_info"]
    return info["prompt_time"] - (info["host_lag_time"] - info["completion_host_lag_time"])


async def test_continuation_is_cached_and_cheaper(live_server: str) -> None:
    async with await connect(live_server) as ws:
        first = (await turn(ws, model="frontier", input="Tell me about KV caches.",
                            max_output_tokens=30, seed=5, store=False))[-1]["response"]
        u1 = first["usage"]
        follow = "And about paged attention?"
        cont = (await turn(ws, model="frontier", input=follow, max_output_tokens=30, seed=6,
                           previous_response_id=first["id"]))[-1]["response"]
        u2 = cont["usage"]
        cached = u2["input_tokens_details"]["cached_tokens"]
        assert cached == u1["input_tokens"] + u1["output_tokens"]
        # billed at the standard tier's prices: $5 in, $0.50 cached, $25 out per MTok
        expected = ((u2["input_tokens"] - cached) * 5 + cached * 0.5 + 30 * 25) / 1e6
        assert u2["cost_usd"] == pytest.approx(expected)
        # the same conversation sent whole, without the connection's memory: no cache
        text = first["output"][0]["content"][0]["text"]
        full = (await turn(ws, model="frontier", max_output_tokens=30, seed=6, input=[
            {"role": "user", "content": "Tell me about KV caches."},
            {"role": "assistant", "content": text},
            {"role": "user", "content": follow},
        ]))[-1]["response"]["usage"]
        assert full["input_tokens"] == u2["input_tokens"]
        assert full["input_tokens_details"]["cached_tokens"] == 0
        assert u2["cost_usd"] < full["cost_usd"]
        # no prefill time for the cached prefix: the modeled prompt times (a busy host's lag
        # before the first token is in prompt_time, and told apart in host_lag_time)
        assert modeled_prompt_time(cont) <= modeled_prompt_time(first) + 0.005
    # store: false lives on its connection only
    async with await connect(live_server) as other:
        err = (await turn(other, model="frontier", input="x",
                          previous_response_id=first["id"]))[-1]
        assert err["error"]["code"] == "previous_response_not_found"


async def test_unknown_previous_response_is_an_error_event(live_server: str) -> None:
    async with await connect(live_server) as ws:
        events = await turn(ws, model="frontier-spark", input="hi",
                            previous_response_id="resp_doesnotexist")
        assert events == [{
            "type": "error", "status": 400,
            "error": {"type": "invalid_request_error", "code": "previous_response_not_found",
                      "param": "previous_response_id",
                      "message": "Previous response with id 'resp_doesnotexist' not found."},
        }]
        ok = await turn(ws, model="frontier-spark", input="hi", max_output_tokens=5)
        assert ok[-1]["type"] in ("response.completed", "response.incomplete")


async def test_gateway_errors_carry_their_status(live_server: str) -> None:
    async with await connect(live_server) as ws:
        err = (await turn(ws, model="nope", input="hi"))[-1]
        assert err["status"] == 404 and err["error"]["code"] == "model_not_found"
        err = (await turn(ws, model="frontier-spark", input="hi",
                          max_output_tokens=10_000_000))[-1]
        assert err["status"] == 400 and err["error"]["code"] == "context_length_exceeded"


# -- bad frames ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "param", "code"),
    [
        ("not json", None, "invalid_json"),
        ("[1, 2]", "type", None),
        ('{"type": "session.update"}', "type", "invalid_value"),
        ('{"no": "type"}', "type", "invalid_value"),
        ('{"type": "response.create", "input": "x"}', "model", "missing_required_parameter"),
        ('{"type": "response.create", "model": "frontier", "input": "x", '
         '"max_output_tokens": 0}', "max_output_tokens", "invalid_value"),
        ('{"type": "response.create", "model": "frontier", "input": "x", "stream_id": 7}',
         "stream_id", "invalid_value"),
        ('{"type": "response.create", "model": "frontier", "input": "x", "background": true}',
         "background", None),
        ('{"type": "response.create", "model": "frontier", '
         '"input": [{"type": "message", "role": "robot", "content": "x"}]}',
         "input[0].role", "invalid_value"),
    ],
)
async def test_bad_frames_get_error_events_and_the_socket_stays_open(
    live_server: str, frame: str, param: str | None, code: str | None
) -> None:
    async with await connect(live_server) as ws:
        await ws.send(frame)
        ev = await recv(ws)
        assert ev["type"] == "error" and ev["status"] == 400
        assert ev["error"]["type"] == "invalid_request_error"
        assert ev["error"]["param"] == param and ev["error"]["code"] == code
        assert ev["error"]["message"]
        ok = await turn(ws, model="frontier-spark", input="still there?", max_output_tokens=5)
        assert ok[-1]["type"] in ("response.completed", "response.incomplete")


async def test_oversized_frame_closes_with_1009(live_server: str) -> None:
    ws = await connect(live_server)
    with pytest.raises(ConnectionClosed) as info:
        await ws.send("x" * (MAX_FRAME_BYTES + 1))
        await recv(ws)
    assert ws.close_code == 1009 or (info.value.rcvd and info.value.rcvd.code == 1009)
    await ws.close()


# -- queueing, lanes, cancel --------------------------------------------------------------


async def test_creates_on_one_lane_run_in_order(live_server: str) -> None:
    async with await connect(live_server) as ws:
        for i in range(3):
            await ws.send(json.dumps({"type": "response.create", "model": "frontier-spark",
                                      "input": f"q{i}", "max_output_tokens": 8}))
        kinds = []
        for _ in range(3):
            events = await until_terminal(ws)
            kinds.append(events[-1]["type"])
            assert events[0]["type"] == "response.created"  # one turn at a time, whole
        assert all(k in ("response.completed", "response.incomplete") for k in kinds)


async def test_stream_id_lanes_run_concurrently(live_server: str) -> None:
    async with await connect(live_server) as ws:
        for sid in ("a", "b"):
            await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                      "input": "lanes", "max_output_tokens": 10,
                                      "stream_id": sid}))
        done: dict[str, dict[str, Any]] = {}
        seen_before_first_done: set[str] = set()
        while len(done) < 2:
            ev = await recv(ws)
            assert ev["stream_id"] in ("a", "b")
            if not done:
                seen_before_first_done.add(ev["stream_id"])
            if ev["type"] in TERMINAL:
                done[ev["stream_id"]] = ev
        assert seen_before_first_done == {"a", "b"}  # interleaved, not one after the other
        assert all(e["type"] == "response.incomplete" for e in done.values())


async def test_cancel_mid_stream_frees_the_slot(live_server: str) -> None:
    cancelled_before = await metric(live_server, "fastmode_cancelled_total", tier="standard")
    async with await connect(live_server) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                  "input": "Write a long essay.", "max_output_tokens": 3000}))
        deltas = 0
        while deltas < 5:
            if (await recv(ws))["type"] == "response.output_text.delta":
                deltas += 1
        assert await metric(live_server, "fastmode_replica_running",
                            deployment="standard") == 1
        await ws.send(json.dumps({"type": "response.cancel"}))
        events = await until_terminal(ws)
        last = events[-1]
        assert last["type"] == "response.incomplete"
        resp = last["response"]
        assert resp["status"] == "cancelled"
        sent = 5 + sum(e["type"] == "response.output_text.delta" for e in events)
        # billed: the tokens generated before the cancel was seen (docs/reliability.md)
        billed = resp["usage"]["output_tokens"]
        assert sent <= billed < 3000
        assert resp["usage"]["cost_usd"] == pytest.approx(
            (resp["usage"]["input_tokens"] * 5 + billed * 25) / 1e6)
        assert await wait_for_metric(live_server, "fastmode_replica_running", 0,
                                     deployment="standard") == 0
        assert await metric(live_server, "fastmode_cancelled_total",
                            tier="standard") == cancelled_before + 1
        # nothing left to cancel; the socket goes on
        await ws.send(json.dumps({"type": "response.cancel"}))
        err = await recv(ws)
        assert err["error"]["code"] == "response_cancel_not_active"
        ok = await turn(ws, model="frontier-spark", input="next", max_output_tokens=5)
        assert ok[-1]["type"] in ("response.completed", "response.incomplete")


async def test_closing_the_socket_cancels_the_response(live_server: str) -> None:
    ws = await connect(live_server)
    await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                              "input": "Write a long essay.", "max_output_tokens": 3000}))
    while (await recv(ws))["type"] != "response.output_text.delta":
        pass
    assert await metric(live_server, "fastmode_replica_running", deployment="standard") == 1
    await ws.close()
    assert await wait_for_metric(live_server, "fastmode_replica_running", 0,
                                 deployment="standard") == 0


# -- connection limits and auth -----------------------------------------------------------


async def test_max_connection_age_closes_with_a_reason(server_factory) -> None:
    base = server_factory(config_text=config_text(max_connection_age_s=0.5))
    async with await connect(base) as ws:
        events = await turn(ws, model="frontier-spark", input="quick", max_output_tokens=5)
        assert events[-1]["type"] in ("response.completed", "response.incomplete")
        with pytest.raises(ConnectionClosed) as info:
            while True:
                await recv(ws)
    close = info.value.rcvd
    assert close is not None and close.code == 1001
    assert "max connection age" in close.reason


async def test_auth_on_the_upgrade(server_factory) -> None:
    text = config_text().replace(
        "[auth]\nenabled = false", f'[auth]\nenabled = true\n[[auth.keys]]\nkey = "{KEY}"\n')
    base = server_factory(config_text=text)
    with pytest.raises(InvalidStatus) as info:
        await connect(base)
    assert info.value.response.status_code == 401
    assert json.loads(info.value.response.body)["error"]["code"] == "invalid_api_key"
    async with await connect(base, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        events = await turn(ws, model="frontier-spark", input="hi", max_output_tokens=5)
        assert events[-1]["type"] in ("response.completed", "response.incomplete")


async def test_emulated_rtt_per_websocket_turn(server_factory) -> None:
    base = server_factory("--emulate-rtt-ms", "20")
    async with await connect(base) as ws:
        for _ in range(2):
            resp = (await turn(ws, model="frontier-spark", input="hi",
                               max_output_tokens=5))[-1]["response"]
            assert resp["time_info"]["network_time"] == pytest.approx(0.020)
    async with httpx.AsyncClient() as c:  # HTTP: a new connection, then a kept-alive one
        times = []
        for _ in range(2):
            r = await c.post(base + "/v1/responses", json={
                "model": "frontier-spark", "input": "hi", "max_output_tokens": 5})
            times.append(r.json()["time_info"]["network_time"])
    assert times == pytest.approx([0.060, 0.020])


# -- the official SDK ---------------------------------------------------------------------


async def test_official_sdk_responses_connect(live_server: str) -> None:
    client = openai.AsyncOpenAI(base_url=live_server + "/v1", api_key="x", max_retries=0)
    async with client.responses.connect() as conn:
        await conn.response.create(model="frontier-spark", input="Hello over a socket",
                                   max_output_tokens=12)
        kinds, text = [], ""
        async for event in conn:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
            if event.type in TERMINAL:
                break
        assert kinds[0] == "response.created"
        first = event.response
        assert first.output[0].content[0].text == text
        await conn.response.create(model="frontier-spark", input="Go on",
                                   previous_response_id=first.id, max_output_tokens=5)
        async for event in conn:
            if event.type in TERMINAL:
                break
        usage = event.response.usage
        assert usage.input_tokens_details.cached_tokens == \
            first.usage.input_tokens + first.usage.output_tokens
        await conn.response.create(model="frontier-spark", input="x",
                                   previous_response_id="resp_nope")
        err = await conn.recv()
        assert type(err).__name__ == "ResponseWsError"
        assert err.status == 400 and err.error.code == "previous_response_not_found"
        # response.cancel is fastmode's extension: the SDK sends it raw
        await conn.response.create(model="frontier", input="A long essay", max_output_tokens=900)
        deltas = 0
        async for event in conn:
            if event.type == "response.output_text.delta":
                deltas += 1
                if deltas == 3:
                    await conn.send_raw('{"type": "response.cancel"}')
            if event.type in TERMINAL:
                break
        assert event.type == "response.incomplete" and event.response.status == "cancelled"
        assert 3 <= event.response.usage.output_tokens < 900
    await client.close()
