"""Reasoning sized by the task and bounded by the client's budget: "hi" at high
effort thought for 5,873 tokens (91 s on standard), and an Agents SDK run with
``max_tokens=300`` failed because the reasoning took the whole budget. With the official SDKs,
on the default behaviour (lognormal lengths)."""

from __future__ import annotations

import json

import anthropic
import openai

from fastmode.backends.reasoning import DEFAULT_MEDIANS, DEFAULT_TASK_SCALE

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def test_a_tight_cap_leaves_the_tool_call_whole(quick_server: str) -> None:
    client = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")
    for seed in range(8):
        r = client.chat.completions.create(
            model="frontier", seed=seed, max_tokens=300, reasoning_effort="high",
            tools=[WEATHER], messages=[{"role": "user", "content": "What's the weather in Oslo?"}])
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert json.loads(choice.message.tool_calls[0].function.arguments)["city"]
        assert 0 < r.usage.completion_tokens_details.reasoning_tokens < 300


def test_hi_at_high_effort_is_a_short_thought(quick_server: str) -> None:
    client = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")
    thought = [client.chat.completions.create(
        model="frontier", seed=s, reasoning_effort="high",
        messages=[{"role": "user", "content": "hi"}]).usage.completion_tokens_details
        .reasoning_tokens for s in range(8)]
    typical = DEFAULT_MEDIANS["high"] * DEFAULT_TASK_SCALE["greeting"]  # 150
    assert all(0 < t < 6 * typical for t in thought), thought
    r = client.responses.create(model="frontier", input="hi", max_output_tokens=50,
                                reasoning={"effort": "high"},
                                extra_body={"seed": 1})  # one draw: the reply's length varies
    # the greeting fits in what the reasoning left: whole, not cut
    assert r.status == "completed" and r.output_text.endswith(("?", "!", "."))
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < 50
    msg = anthropic.Anthropic(base_url=quick_server, api_key="x").messages.create(
        model="frontier", max_tokens=2048, messages=[{"role": "user", "content": "hi"}],
        thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[1].text
