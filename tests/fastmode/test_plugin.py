"""The ``fastmode`` fixture: per-test replies, counted faults, clients and the journal."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def test_a_scripted_tool_call_takes_the_prompts_city_and_the_final_answer(fastmode) -> None:
    fastmode.reply(match=r"weather in (?P<city>\w+)",
                   tool_call={"name": "get_weather", "arguments": {"city": r"\g<city>"}})
    fastmode.reply(match=r"sunny", text="It is sunny in Lyon.")
    client = fastmode.openai()
    messages = [{"role": "user", "content": "What is the weather in Lyon?"}]
    first = client.chat.completions.create(model="frontier", messages=messages, tools=TOOLS)
    (call,) = first.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Lyon"}
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"}]
    final = client.chat.completions.create(model="frontier", messages=messages, tools=TOOLS)
    assert final.choices[0].message.content == "It is sunny in Lyon."
    calls = fastmode.requests
    assert [c.tier for c in calls] == ["standard", "standard"]
    assert calls[0].tools == ["get_weather"]
    assert calls[1].messages[-1]["content"] == "sunny, 24 C"
    assert calls[1].reply["text"] == "It is sunny in Lyon."
    assert all(c.cost_usd > 0 and c.usage["output_tokens"] > 0 for c in calls)
    fastmode.assert_all_replies_used()
    fastmode.assert_no_unexpected_calls()


def test_a_429_once_then_the_retry_succeeds(fastmode) -> None:
    fastmode.fail("429", times=1)
    no_retry = fastmode.openai(max_retries=0)
    ask = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.RateLimitError):
        no_retry.chat.completions.create(model="frontier-spark", messages=ask)
    ok = no_retry.chat.completions.create(model="frontier-spark", messages=ask)
    assert ok.choices[0].message.content
    assert len(fastmode.requests) == 1  # the refused one never reached the engine


def test_scripts_and_faults_stay_in_their_test(fastmode, fastmode_server) -> None:
    fastmode.reply(match="hello", text="scoped answer")
    fastmode.fail("500", times=5)
    other = fastmode_server.openai(max_retries=0)  # no test id: another test's traffic
    r = other.chat.completions.create(model="frontier-spark",
                                      messages=[{"role": "user", "content": "hello"}])
    assert r.choices[0].message.content != "scoped answer"
    assert fastmode.requests == []


def test_anthropic_and_times(fastmode) -> None:
    fastmode.reply(match="ping", text="pong", times=1)
    client = fastmode.anthropic()
    ask = [{"role": "user", "content": "ping"}]
    first = client.messages.create(model="frontier", max_tokens=50, messages=ask)
    second = client.messages.create(model="frontier", max_tokens=50, messages=ask)
    assert first.content[0].text == "pong" and second.content[0].text != "pong"
    assert [c.scripted for c in fastmode.requests] == [True, False]
    assert fastmode.requests[0].protocol == "messages"
    with pytest.raises(AssertionError, match="no reply was scripted"):
        fastmode.assert_no_unexpected_calls()


def test_bad_replies_and_faults_are_refused(fastmode) -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        fastmode.reply(match="x", text="a", json={"b": 1})
    with pytest.raises(ValueError, match="regex"):
        fastmode.reply(match="(", text="a")
    with pytest.raises(ValueError, match="kind"):
        fastmode.fail("nonsense")


def test_the_journal_over_http_is_owned_by_the_key(fastmode) -> None:
    fastmode.reply(match="hi", json={"ok": True})
    r = fastmode.openai().chat.completions.create(
        model="frontier-spark", messages=[{"role": "user", "content": "hi"}])
    assert json.loads(r.choices[0].message.content) == {"ok": True}
    url = f"{fastmode.url}/v1/fastmode/journal"
    body = httpx.get(url, params={"test_id": fastmode.test_id}).json()  # auth off: all
    assert [e["reply"]["text"] for e in body["data"]] == ['{"ok":true}']
    assert httpx.get(url).status_code == 400


def test_a_scripted_reply_on_the_responses_stream_and_the_fast_tier(fastmode) -> None:
    fastmode.reply(match=r"order (\d+)", tool_call={"name": "lookup", "arguments": {"id": r"\1"}})
    tools = [{"type": "function", "name": "lookup",
              "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}]
    events = list(fastmode.openai().responses.create(
        model="frontier", input="where is order 42?", tools=tools, stream=True,
        service_tier="priority"))
    done = events[-1].response
    (call,) = [item for item in done.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("lookup", {"id": "42"})
    (entry,) = fastmode.requests
    assert (entry.protocol, entry.tier, entry.scripted) == ("responses", "fast", True)
