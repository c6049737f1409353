"""The endpoints users call besides the turn routes: legacy Completions (as the SDK and as
``vllm bench serve`` send it), stored responses (retrieve, delete, input items) and Anthropic's
token counting, each as the providers document it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anthropic
import httpx
import openai
import pytest

from fastmode.gateway.app import create_app

USER = [{"role": "user", "content": "What is the weather in Lyon?"}]


# -- Completions with the OpenAI SDK ------------------------------------------------------------


def test_completions_non_streaming_and_echo(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")
    c = client.completions.create(model="frontier", prompt="Once upon a time", max_tokens=12,
                                  seed=7)
    assert c.object == "text_completion" and c.id.startswith("cmpl-")
    choice = c.choices[0]
    assert choice.index == 0 and choice.text and choice.finish_reason in ("stop", "length")
    assert c.usage is not None and c.usage.completion_tokens <= 12
    assert c.usage.prompt_tokens == 4  # "Once", " upon", " a", " time"
    echoed = client.completions.create(model="frontier", prompt="Once upon a time",
                                       max_tokens=12, seed=7, echo=True)
    assert echoed.choices[0].text == "Once upon a time" + choice.text
    # a list holding one prompt is the same request
    listed = client.completions.create(model="frontier", prompt=["Once upon a time"],
                                       max_tokens=12, seed=7)
    assert listed.choices[0].text == choice.text


def test_completions_default_max_tokens_is_16_and_ignore_eos_is_exact(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")
    c = client.completions.create(model="frontier", prompt="Write a long story about caches",
                                  extra_body={"ignore_eos": True})
    assert c.usage is not None and c.usage.completion_tokens == 16
    assert c.choices[0].finish_reason == "length"


def test_completions_streaming_with_usage(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")
    stream = client.completions.create(model="frontier", prompt=[[11, 22, 33] * 10],
                                       max_tokens=20, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert len(texts) == 20 and all(texts)  # one chunk per token, the first one a token
    assert reasons[-1] == "length" and set(reasons[:-1]) == {None}
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    assert usage.prompt_tokens == 30 and usage.completion_tokens == 20  # token ids count as is


def test_completions_errors_name_the_field(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x", max_retries=0)
    for kwargs, param in (
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": [[1, 2]], "echo": True}, "echo"),
        ({"prompt": "hi", "n": 2}, "n"),
        ({"prompt": "hi", "logprobs": 2}, "logprobs"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ):
        with pytest.raises(openai.BadRequestError) as exc:
            client.completions.create(model="frontier", **kwargs)
        assert exc.value.body["param"] == param, kwargs
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="hi")


def test_vllm_bench_serve_request_parses_as_its_client_does(live_server: str) -> None:
    """The body ``vllm bench serve`` posts to /v1/completions (vllm/benchmarks/lib/
    endpoint_request_func.py: model, prompt, repetition_penalty, max_tokens, logprobs=None,
    stream, stream_options.include_usage, ignore_eos), read as its client reads it: a chunk
    with ``choices`` is a token (the first one sets TTFT), a chunk with only ``usage`` gives
    ``completion_tokens``, ``data: [DONE]`` ends."""
    payload = {"model": "frontier", "prompt": "word " * 600, "repetition_penalty": 1.0,
               "max_tokens": 32, "logprobs": None, "stream": True,
               "stream_options": {"include_usage": True}, "ignore_eos": True}
    tokens, output_tokens, done, text = 0, None, False, ""
    with httpx.stream("POST", live_server + "/v1/completions", json=payload,
                      timeout=30) as r:
        assert r.status_code == 200
        buf = ""
        for raw in r.iter_text():
            buf += raw
            while "\n\n" in buf:
                message, buf = buf.split("\n\n", 1)
                chunk = message.strip().removeprefix("data: ")
                if chunk == "[DONE]":
                    done = True
                    continue
                data = json.loads(chunk)
                if choices := data.get("choices"):
                    tokens += 1
                    text += choices[0].get("text") or ""
                elif usage := data.get("usage"):
                    output_tokens = usage.get("completion_tokens")
    assert done and tokens == 32 and output_tokens == 32 and text


# -- stored responses with the OpenAI SDK -------------------------------------------------------


def test_retrieve_list_input_items_and_delete_a_response(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")
    items = [{"role": "user", "content": f"question {i}"} for i in range(5)]
    created = client.responses.create(model="frontier", input=items, max_output_tokens=8)
    got = client.responses.retrieve(created.id)
    assert got.id == created.id and got.output_text == created.output_text
    assert got.usage is not None and got.usage.output_tokens == created.usage.output_tokens
    page = client.responses.input_items.list(created.id, limit=2, order="asc")
    assert [i.content[0].text for i in page.data] == ["question 0", "question 1"]
    assert page.has_more
    every = [i.content[0].text for i in client.responses.input_items.list(created.id, limit=2)]
    assert every == [f"question {i}" for i in range(4, -1, -1)]  # newest first; pages followed
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)


def test_unstored_responses_are_not_found_and_tool_outputs_are_items(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")
    hidden = client.responses.create(model="frontier", input="hi", store=False,
                                     max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(hidden.id)
    first = client.responses.create(
        model="frontier", input="weather in Lyon?", max_output_tokens=40,
        tools=[{"type": "function", "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}], tool_choice="required")
    call = first.output[0]
    assert call.type == "function_call"
    second = client.responses.create(
        model="frontier", previous_response_id=first.id, max_output_tokens=8,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    listed = client.responses.input_items.list(second.id).data
    assert [i.type for i in listed] == ["function_call_output"]
    assert listed[0].output == "sunny" and listed[0].id


# -- Anthropic count_tokens ---------------------------------------------------------------------


def test_count_tokens_matches_what_messages_bills(live_server: str) -> None:
    client = anthropic.Anthropic(base_url=live_server, api_key="x")
    tools = [{"name": "get_weather", "description": "Weather for a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    kwargs = {"model": "frontier", "system": "You are terse.", "messages": USER, "tools": tools}
    counted = client.messages.count_tokens(**kwargs)
    msg = client.messages.create(max_tokens=5, tool_choice={"type": "none"}, **kwargs)
    assert counted.input_tokens == msg.usage.input_tokens > 20
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=USER)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model="frontier", messages=[])


# -- in process: formats of the edge cases ------------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app()
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                          timeout=60)
    yield c
    await c.aclose()
    await ctx.__aexit__(None, None, None)


async def test_input_items_paging_parameters_are_checked(client) -> None:
    r = await client.post("/v1/responses", json={"model": "frontier", "input": "hi",
                                                  "max_output_tokens": 3})
    rid = r.json()["id"]
    for query, param in (("limit=0", "limit"), ("limit=x", "limit"), ("order=up", "order"),
                         ("after=nope", "after")):
        bad = await client.get(f"/v1/responses/{rid}/input_items?{query}")
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param
    streamed = await client.get(f"/v1/responses/{rid}?stream=true")
    assert streamed.status_code == 400


async def test_completions_bad_json_and_count_tokens_bad_body_in_their_formats(client) -> None:
    r = await client.post("/v1/completions", content=b"{nope")
    assert r.status_code == 400 and "error" in r.json()
    r = await client.post("/v1/messages/count_tokens", json={"model": "frontier"})
    assert r.status_code == 400
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
