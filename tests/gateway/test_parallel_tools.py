"""Parallel tool calls through the official SDKs: two or more calls in one turn with the right
indices and ids (streamed and not), on Chat, Responses and Messages; ``parallel_tool_calls:
false`` turns them off; the agent loop still ends in text. On ``quick_server``: what is served
is checked, not how fast."""

from __future__ import annotations

import json

import anthropic
import openai

from fastmode.backends.mockmodel import validate_arguments

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": CITY}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a city",
                                      "parameters": CITY}},
]
ASK = [{"role": "user", "content": "What are the weather and the time in Paris?"}]


def oa(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x")


def parallel_seed(url: str) -> int:
    """The first seed whose turn calls both tools (the share is 25% on the default config)."""
    for seed in range(40):
        resp = oa(url).chat.completions.create(model="frontier", messages=ASK, tools=TOOLS,
                                               seed=seed)
        if len(resp.choices[0].message.tool_calls or ()) > 1:
            return seed
    raise AssertionError("no parallel call in 40 seeds")


def test_chat_parallel_calls_streamed_and_not(quick_server: str) -> None:
    seed = parallel_seed(quick_server)
    whole = oa(quick_server).chat.completions.create(model="frontier", messages=ASK, tools=TOOLS,
                                                    seed=seed)
    calls = whole.choices[0].message.tool_calls
    assert {c.function.name for c in calls} == {"get_weather", "get_time"}
    assert len({c.id for c in calls}) == 2
    assert whole.choices[0].finish_reason == "tool_calls"
    for c in calls:
        assert validate_arguments(CITY, c.function.arguments, strict=True) == []
        assert json.loads(c.function.arguments)["city"] == "Paris"
    # streamed: each call's first delta has its index, id and name; the SDK merges by index
    with oa(quick_server).chat.completions.stream(model="frontier", messages=ASK, tools=TOOLS,
                                                 seed=seed) as stream:
        firsts = [d for e in stream if e.type == "chunk" and e.chunk.choices
                  for d in e.chunk.choices[0].delta.tool_calls or () if d.id]
        final = stream.get_final_completion()
    assert [(d.index, d.id, d.function.name) for d in firsts] == \
        [(i, c.id, c.function.name) for i, c in enumerate(calls)]
    streamed = final.choices[0].message.tool_calls
    assert [(c.id, c.function.arguments) for c in streamed] == \
        [(c.id, c.function.arguments) for c in calls]
    # the loop ends: after both results the model answers in text
    history = [*ASK, whole.choices[0].message.model_dump(exclude_none=True)]
    history += [{"role": "tool", "tool_call_id": c.id, "content": "sunny, 21C"} for c in calls]
    answer = oa(quick_server).chat.completions.create(model="frontier", messages=history,
                                                     tools=TOOLS, seed=seed)
    assert answer.choices[0].message.tool_calls is None and answer.choices[0].message.content


def test_parallel_tool_calls_false_gives_one_call(quick_server: str) -> None:
    for seed in range(12):
        resp = oa(quick_server).chat.completions.create(
            model="frontier", messages=ASK, tools=TOOLS, seed=seed, parallel_tool_calls=False)
        assert len(resp.choices[0].message.tool_calls) == 1


def test_responses_parallel_function_calls(quick_server: str) -> None:
    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    seed = parallel_seed(quick_server)
    with oa(quick_server).responses.stream(model="frontier", input=ASK, tools=tools,
                                          extra_body={"seed": seed}) as stream:
        added = [e for e in stream if e.type == "response.output_item.added"]
        final = stream.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert len(calls) == 2 and len({c.call_id for c in calls}) == 2
    assert [e.output_index for e in added] == [0, 1]
    assert final.parallel_tool_calls is True


def test_anthropic_parallel_tool_use(quick_server: str) -> None:
    client = anthropic.Anthropic(base_url=quick_server, api_key="x")
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": CITY} for t in TOOLS]
    counts = []
    for _ in range(30):  # Anthropic has no seed: unseeded turns, about a quarter parallel
        msg = client.messages.create(model="frontier", max_tokens=300, messages=ASK,
                                     tools=tools)
        uses = [b for b in msg.content if b.type == "tool_use"]
        counts.append(len(uses))
        if len(uses) > 1:
            assert len({u.id for u in uses}) == len(uses)
            assert msg.stop_reason == "tool_use"
    assert max(counts) >= 2
    off = client.messages.create(model="frontier", max_tokens=300, messages=ASK, tools=tools,
                                 tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert len([b for b in off.content if b.type == "tool_use"]) == 1
