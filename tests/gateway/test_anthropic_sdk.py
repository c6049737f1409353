"""The Messages endpoint driven by the official anthropic SDK, fast mode included."""

from __future__ import annotations

import anthropic
import pytest

from fastmode.backends.mockmodel import validate_arguments

WEATHER = {
    "name": "get_weather",
    "description": "Get the weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
    },
}
USER = [{"role": "user", "content": "What is the weather in Lyon?"}]


def client(url: str, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="x", **kw)


def test_message_and_usage(live_server: str) -> None:
    raw = client(live_server).messages.with_raw_response.create(
        model="frontier", max_tokens=20, messages=USER
    )
    msg = raw.parse()
    assert raw.headers["x-fastmode-tier"] == "standard"
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.content[0].type == "text" and msg.content[0].text
    assert msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens == 20
    assert msg.usage.speed == "standard"


def test_fast_mode_needs_the_beta_and_reports_speed(live_server: str) -> None:
    c = client(live_server, max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        c.messages.create(model="frontier", max_tokens=5, messages=USER,
                          extra_body={"speed": "fast"})
    raw = c.messages.with_raw_response.create(
        model="frontier", max_tokens=5, messages=USER, extra_body={"speed": "fast"},
        extra_headers={"anthropic-beta": "fast-mode-2026-02-01"},
    )
    msg = raw.parse()
    assert raw.headers["x-fastmode-tier"] == "fast"
    assert msg.usage.speed == "fast"


def test_streaming_text_matches(live_server: str) -> None:
    c = client(live_server)
    with c.messages.stream(model="frontier-spark", max_tokens=40, messages=USER,
                           extra_body={"temperature": 0}) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text
    assert final.usage.output_tokens == 40
    again = c.messages.create(model="frontier-spark", max_tokens=40, messages=USER,
                              extra_body={"temperature": 0})
    assert again.content[0].text == text


def test_tool_use_round_trip(live_server: str) -> None:
    c = client(live_server)
    msg = c.messages.create(model="frontier", max_tokens=200, messages=USER, tools=[WEATHER],
                            tool_choice={"type": "any"})
    assert msg.stop_reason == "tool_use"
    use = msg.content[0]
    assert use.type == "tool_use" and use.name == "get_weather"
    import json
    assert validate_arguments(WEATHER["input_schema"], json.dumps(use.input)) == []
    with c.messages.stream(model="frontier", max_tokens=200, messages=USER, tools=[WEATHER],
                           tool_choice={"type": "any"}) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "tool_use" and "city" in final.content[0].input
    # after the tool result the model answers in text
    follow = c.messages.create(model="frontier", max_tokens=50, tools=[WEATHER], messages=[
        *USER,
        {"role": "assistant", "content": [use.model_dump()]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]},
    ])
    assert follow.content[0].type == "text"


def test_stop_sequence(live_server: str) -> None:
    c = client(live_server)
    base = c.messages.create(model="frontier-spark", max_tokens=60, messages=USER,
                             extra_body={"temperature": 0})
    word = base.content[0].text.split()[3]
    cut = c.messages.create(model="frontier-spark", max_tokens=60, messages=USER,
                            extra_body={"temperature": 0}, stop_sequences=[word])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == word
    assert word not in cut.content[0].text


def test_errors_in_anthropic_format(live_server: str) -> None:
    c = client(live_server, max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as e:
        c.messages.create(model="no-such-model", max_tokens=5, messages=USER)
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model="frontier", max_tokens=5, messages=[])
    assert e.value.body["error"]["type"] == "invalid_request_error"
