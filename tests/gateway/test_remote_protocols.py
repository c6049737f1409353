"""Every protocol through a remote tier: the gateway translates to the upstream's Chat
Completions and answers in the client's protocol (Responses over SSE, non-streamed and over the
websocket, with previous_response_id; Anthropic Messages), billing at its own prices.

Uses the scripted fake upstreams of test_remote.py (two behind the fast tier, a dead address
behind spark), driven with the official openai and anthropic SDKs.
"""
# ruff: noqa: F811 - `topo` is the fixture imported from test_remote, used as a parameter

from __future__ import annotations

import anthropic
import openai
import pytest
from test_remote import aclient, gw_metric, topo  # noqa: F401

from fastmode.backends.tokenizer import count_chat_prompt
from fastmode.gateway.remote import upstream_payload
from fastmode.gateway.values.request import TurnRequest

WEATHER = {"type": "function", "name": "get_weather", "description": "weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def bodies(topo) -> list[dict]:
    return topo["a"].bodies + topo["b"].bodies


def fast_price(topo, prompt: int, cached: int, output: int) -> float:
    return topo["app"].state.gateway.spec.tiers["fast"].prices.cost(prompt, cached, output)


async def test_responses_non_streamed(topo) -> None:
    raw = await aclient(topo["gw"]).responses.with_raw_response.create(
        model="frontier", input=[{"role": "user", "content": [
            {"type": "input_text", "text": "hello"}]}], max_output_tokens=50)
    resp = raw.parse()
    assert resp.output_text == "hi " * 5
    assert resp.service_tier == "priority" and raw.headers["x-fastmode-tier"] == "fast"
    assert raw.headers["x-fastmode-upstream"] in (topo["ua"], topo["ub"])
    assert resp.usage.input_tokens == 10 and resp.usage.output_tokens == 5  # the engine's count
    assert resp.usage.model_extra["cost_usd"] == pytest.approx(fast_price(topo, 10, 0, 5))
    up = bodies(topo)[0]
    assert up["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert up["max_tokens"] == 50 and up["stream"] is False and "service_tier" not in up
    assert await gw_metric(topo["gw"], "fastmode_output_tokens_total", tier="fast") == 5


async def test_responses_stream_and_continuation(topo) -> None:
    client = aclient(topo["gw"])
    text, done = "", None
    async with client.responses.stream(model="frontier", input="hello",
                                       instructions="be brief") as stream:
        async for event in stream:
            if event.type == "response.output_text.delta":
                text += event.delta
        done = await stream.get_final_response()
    assert text == "t0 t1 t2 t3 t4 " == done.output_text
    assert done.usage.output_tokens == 5
    assert done.usage.model_extra["cost_usd"] == pytest.approx(fast_price(topo, 10, 0, 5))
    first = bodies(topo)[0]
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    assert first["messages"][0] == {"role": "system", "content": "be brief"}
    # the conversation stays at the gateway: the next turn sends it whole upstream
    await client.responses.create(model="frontier", input="and then?",
                                  previous_response_id=done.id)
    second = bodies(topo)[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == "t0 t1 t2 t3 t4 " and second[3]["content"] == "and then?"


async def test_responses_tool_call_streamed(topo) -> None:
    topo["a"].tool = topo["b"].tool = True
    async with aclient(topo["gw"]).responses.stream(
            model="frontier", input="weather in Lyon?", tools=[WEATHER],
            tool_choice="required") as stream:
        deltas = [e.delta async for e in stream
                  if e.type == "response.function_call_arguments.delta"]
        final = await stream.get_final_response()
    call = final.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.arguments == '{"city": "Lyon"}' == "".join(deltas)
    assert call.call_id == "call_fake1"
    up = bodies(topo)[0]
    assert up["tool_choice"] == "required"
    assert up["tools"][0]["function"]["name"] == "get_weather"


async def test_responses_websocket_with_continuation(topo) -> None:
    client = aclient(topo["gw"])
    async with client.responses.connect() as conn:
        await conn.response.create(model="frontier", input="hello")
        first = None
        async for event in conn:
            if event.type == "response.completed":
                first = event.response
                break
        assert first is not None and first.output_text == "t0 t1 t2 t3 t4 "
        await conn.response.create(model="frontier", input="more",
                                   previous_response_id=first.id)
        async for event in conn:
            if event.type == "response.completed":
                assert event.response.usage.output_tokens == 5
                break
    assert [m["role"] for m in bodies(topo)[1]["messages"]] == ["user", "assistant", "user"]
    assert await gw_metric(topo["gw"], "fastmode_requests_total", tier="fast",
                           status="200") == 2


async def test_anthropic_messages_non_streamed_and_streamed(topo) -> None:
    client = anthropic.AsyncAnthropic(base_url=topo["gw"] + "/fast", api_key="x",
                                      max_retries=0, timeout=10)
    msg = await client.messages.create(model="frontier", max_tokens=40,
                                       messages=[{"role": "user", "content": "hello"}])
    assert msg.content[0].text == "hi " * 5 and msg.usage.output_tokens == 5
    assert msg.usage.speed == "fast"
    # the count of what the client sent (as in process), not the upstream's of its translation
    sent = count_chat_prompt([{"role": "user", "content": "hello"}], None)
    assert msg.usage.input_tokens == sent != 10
    assert msg.usage.model_extra["cost_usd"] == pytest.approx(fast_price(topo, sent, 0, 5))
    async with client.messages.stream(model="frontier", max_tokens=40,
                                      messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join([t async for t in s.text_stream])
        final = await s.get_final_message()
    assert text == "t0 t1 t2 t3 t4 " and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5
    assert bodies(topo)[1]["max_tokens"] == 40
    await client.close()


async def test_anthropic_tool_use_through_the_engine(topo) -> None:
    topo["a"].tool = topo["b"].tool = True
    client = anthropic.AsyncAnthropic(base_url=topo["gw"] + "/fast", api_key="x",
                                      max_retries=0, timeout=10)
    tools = [{"name": "get_weather", "description": "weather",
              "input_schema": WEATHER["parameters"]}]
    msg = await client.messages.create(model="frontier", max_tokens=40, tools=tools,
                                       messages=[{"role": "user", "content": "weather?"}])
    assert msg.stop_reason == "tool_use"
    assert msg.content[0].name == "get_weather" and msg.content[0].input == {"city": "Lyon"}
    async with client.messages.stream(model="frontier", max_tokens=40, tools=tools,
                                      messages=[{"role": "user", "content": "again"}]) as s:
        final = await s.get_final_message()
    assert final.content[0].input == {"city": "Lyon"} and final.stop_reason == "tool_use"
    await client.close()


async def test_errors_keep_each_protocols_format(topo) -> None:
    topo["a"].mode = topo["b"].mode = "400"
    client = anthropic.AsyncAnthropic(base_url=topo["gw"] + "/fast", api_key="x",
                                      max_retries=0, timeout=10)
    with pytest.raises(anthropic.BadRequestError) as exc:
        await client.messages.create(model="frontier", max_tokens=5,
                                     messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["type"] == "error" and "bad temperature" in str(exc.value)
    await client.close()
    with pytest.raises(openai.InternalServerError) as down:  # spark's only upstream is dead
        await aclient(topo["gw"], "/v1").responses.create(model="frontier-spark", input="x")
    assert down.value.status_code == 503 and down.value.code == "upstream_unavailable"


async def test_readiness_reflects_the_upstreams(topo) -> None:
    ready = topo["app"].state.remote.readiness()
    assert ready["ready"] is False  # spark's only upstream is a dead address
    assert ready["tiers"]["spark"] == {"in_rotation": 0, "upstreams": 1}
    assert ready["tiers"]["fast"] == {"in_rotation": 2, "upstreams": 2}


def test_upstream_payload_of_a_turn() -> None:
    from fastmode.backends.mockmodel import GenerationRequest, ToolSpec

    gen = GenerationRequest(
        messages=[{"role": "developer", "content": [{"type": "input_text", "text": "hi"}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "17C", "name": None}],
        stop=("END",), seed=7, temperature=0.5, ignore_eos=True,
        tools=(ToolSpec("f", "d", {"type": "object"}),), tool_choice="f")
    turn = TurnRequest(model="frontier", role="standard", generation=gen, prompt_tokens=9,
                       max_tokens=None, stream=True)
    import orjson

    body = orjson.loads(upstream_payload(turn, 123, "served-name", stream=True))
    assert body["model"] == "served-name" and body["max_tokens"] == 123
    assert body["messages"][0]["content"] == [{"type": "text", "text": "hi"}]
    assert body["messages"][1] == {"role": "tool", "tool_call_id": "c1", "content": "17C"}
    assert body["stop"] == ["END"] and body["seed"] == 7 and body["ignore_eos"] is True
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert body["tools"][0]["function"] == {"name": "f", "description": "d",
                                            "parameters": {"type": "object"}}
    assert body["stream_options"] == {"include_usage": True}
