"""Raw reasoning for models configured to show it (``raw_reasoning`` in ``[behavior.MODEL]``):
the vLLM / gpt-oss convention that guidellm, vLLM's clients and the gpt-oss
compatibility harness read, driven with the official openai SDK (and a websocket client):

* Chat: ``message.reasoning`` and ``message.reasoning_content``; streamed, one
  ``delta.reasoning`` (and ``delta.reasoning_content``) per reasoning token before the content;
* Responses: the reasoning item's ``content`` is ``[{"type": "reasoning_text", "text"}]``,
  streamed as ``response.reasoning_text.delta`` / ``.done`` (SSE and websocket), with
  summaries and ``encrypted_content`` still given when asked for;
* the OpenAI-hosted style (``frontier``, the default) keeps its reasoning hidden;
* a remote tier passes an upstream's reasoning deltas through (a fastmode engine serving
  gpt-oss upstream), shown or hidden as the gateway's model is configured, never as content.
"""

from __future__ import annotations

import contextlib
import tomllib
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import orjson
from conftest import quick_config_text
from test_remote import serve
from test_ws import connect, turn

from fastmode.backends.mockmodel import REASONING
from fastmode.backends.tokenizer import tokenize
from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config
from fastmode.gateway.engine_config import engine_config
from fastmode.gateway.remote.translate import ChunkReader, LiveReply, reply_from_completion

OSS = "gpt-oss-120b"
USER = [{"role": "user", "content": "Explain the trade-offs of continuous batching"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def oa(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)


def extra(obj: Any, key: str) -> Any:
    return (obj.model_extra or {}).get(key)


def test_chat_body_shows_the_reasoning(quick_server: str) -> None:
    r = oa(quick_server).chat.completions.create(model=OSS, messages=USER,
                                                 reasoning_effort="low", seed=3)
    msg = r.choices[0].message
    thought = extra(msg, "reasoning")
    assert isinstance(thought, str) and thought and extra(msg, "reasoning_content") == thought
    assert msg.content and thought not in msg.content
    # every reasoning token shown is one billed
    assert len(tokenize(thought)) == r.usage.completion_tokens_details.reasoning_tokens
    # a tool call carries its reasoning too (the gpt-oss harness's first turn)
    call = oa(quick_server).chat.completions.create(
        model=OSS, messages=[{"role": "user", "content": "Weather in Lyon?"}],
        tools=[WEATHER], tool_choice="required")
    assert call.choices[0].message.tool_calls and extra(call.choices[0].message, "reasoning")


def test_chat_stream_shows_reasoning_deltas_first(quick_server: str) -> None:
    chunks = list(oa(quick_server).chat.completions.create(
        model=OSS, messages=USER, reasoning_effort="low", stream=True,
        stream_options={"include_usage": True}))
    kinds, thought = [], []
    for ch in chunks:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        if extra(d, "reasoning") is not None:
            assert extra(d, "reasoning_content") == extra(d, "reasoning")
            thought.append(extra(d, "reasoning"))
            kinds.append("reasoning")
        elif d.content:
            kinds.append("content")
    assert kinds[0] == "reasoning" and "content" in kinds
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning")  # all reasoning first
    usage = chunks[-1].usage
    assert len(thought) == usage.completion_tokens_details.reasoning_tokens


def test_hosted_style_keeps_reasoning_hidden(quick_server: str) -> None:
    r = oa(quick_server).chat.completions.create(model="frontier", messages=USER,
                                                 reasoning_effort="low", max_tokens=600)
    assert r.usage.completion_tokens_details.reasoning_tokens > 0
    assert "reasoning" not in (r.choices[0].message.model_extra or {})
    stream = oa(quick_server).chat.completions.create(
        model="frontier", messages=USER, reasoning_effort="low", stream=True, max_tokens=600)
    assert not [ch for ch in stream if ch.choices and extra(ch.choices[0].delta, "reasoning")]
    resp = oa(quick_server).responses.create(model="frontier", input="Plan a rollout",
                                             reasoning={"effort": "low", "summary": "auto"})
    item = resp.output[0]
    assert item.type == "reasoning" and item.summary and not item.content


def test_responses_reasoning_text_with_summary_and_encrypted_content(quick_server: str) -> None:
    resp = oa(quick_server).responses.create(
        model=OSS, input="Plan a rollout", reasoning={"effort": "low", "summary": "auto"},
        include=["reasoning.encrypted_content"])
    item = resp.output[0]
    assert item.type == "reasoning" and [c.type for c in item.content] == ["reasoning_text"]
    text = item.content[0].text
    assert len(tokenize(text)) == resp.usage.output_tokens_details.reasoning_tokens
    assert item.summary and item.encrypted_content  # the hosted style's parts stay
    assert resp.output[1].type == "message" and resp.output_text


def check_reasoning_events(events: list[dict[str, Any]]) -> None:
    """The raw reasoning events of one response, in order, agree with its final item."""
    kinds = [e["type"] for e in events]
    deltas = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    done = [e for e in events if e["type"] == "response.reasoning_text.done"]
    assert deltas and len(done) == 1
    added = next(e for e in events if e["type"] == "response.content_part.added")
    assert added["part"] == {"type": "reasoning_text", "text": ""} and added["output_index"] == 0
    assert kinds.index("response.content_part.added") < kinds.index(
        "response.reasoning_text.delta") < kinds.index("response.reasoning_text.done")
    final = events[-1]["response"]
    item = final["output"][0]
    assert "".join(deltas) == done[0]["text"] == item["content"][0]["text"]
    assert len(deltas) == final["usage"]["output_tokens_details"]["reasoning_tokens"]
    # the item is done before the message opens
    item_done = next(i for i, e in enumerate(events) if e["type"] == "response.output_item.done")
    assert item_done < kinds.index("response.output_text.delta")


def test_responses_sse_streams_reasoning_text(quick_server: str) -> None:
    with oa(quick_server).responses.stream(model=OSS, input="Plan a rollout",
                                           reasoning={"effort": "low"}) as stream:
        events = [e.to_dict(warnings=False) for e in stream]
    check_reasoning_events(events)


async def test_responses_websocket_streams_reasoning_text(quick_server: str) -> None:
    ws = await connect(quick_server)
    try:
        events = await turn(ws, model=OSS, input="Plan a rollout", reasoning={"effort": "low"})
    finally:
        await ws.close()
    assert events[-1]["type"] == "response.completed"
    check_reasoning_events(events)


# -- a remote tier: an upstream engine that shows its reasoning ------------------------------


def remote_oss(upstream: str, raw: bool) -> Config:
    """The built-in config (quick hardware) with the gpt-oss tier served by ``upstream``."""
    text = quick_config_text()
    if not raw:
        text = text.replace("raw_reasoning = true", "raw_reasoning = false")
    data = tomllib.loads(text)
    data["remote"] = {"tiers": {"oss": {"upstreams": [upstream]}}}
    return Config.model_validate(data)


@contextlib.asynccontextmanager
async def gateways() -> AsyncIterator[dict[str, str]]:
    """An engine serving gpt-oss (raw reasoning) and two gateways in front of it, one that
    shows its model's reasoning and one that hides it."""
    engine = create_app(engine_config(Config.model_validate(tomllib.loads(
        quick_config_text())), "oss", replicas=1))
    async with serve(engine) as up:
        async with serve(create_app(remote_oss(up, True))) as shows, \
                serve(create_app(remote_oss(up, False))) as hides:
            yield {"shows": shows, "hides": hides}


async def test_remote_tier_passes_upstream_reasoning_through() -> None:
    async with gateways() as gw:
        c = openai.AsyncOpenAI(base_url=gw["shows"] + "/v1", api_key="x", max_retries=0)
        body = await c.chat.completions.create(model=OSS, messages=USER,
                                               reasoning_effort="low")
        assert extra(body.choices[0].message, "reasoning")
        stream = await c.chat.completions.create(model=OSS, messages=USER,
                                                 reasoning_effort="low", stream=True)
        deltas = [extra(ch.choices[0].delta, "reasoning") async for ch in stream
                  if ch.choices and extra(ch.choices[0].delta, "reasoning")]
        assert deltas
        async with c.responses.stream(model=OSS, input="Plan a rollout",
                                      reasoning={"effort": "low"}) as rs:
            events = [e.to_dict(warnings=False) async for e in rs]
        check_reasoning_events(events)
        await c.close()


async def test_remote_reasoning_hidden_never_becomes_content() -> None:
    async with gateways() as gw:
        c = openai.AsyncOpenAI(base_url=gw["hides"] + "/v1", api_key="x", max_retries=0)
        stream = await c.chat.completions.create(model=OSS, messages=USER,
                                                 reasoning_effort="low", stream=True)
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream
                        if ch.choices and not extra(ch.choices[0].delta, "reasoning")])
        async with c.responses.stream(model=OSS, input="Plan a rollout",
                                      reasoning={"effort": "low"}) as rs:
            events = [e.to_dict(warnings=False) async for e in rs]
        await c.close()
        final = events[-1]["response"]
        assert [o["type"] for o in final["output"]] == ["reasoning", "message"]
        assert not final["output"][0].get("content")  # hidden: no reasoning_text
        shown = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert shown == final["output"][1]["content"][0]["text"]
        assert "The user is asking" not in shown + text  # how the mock's reasoning opens
        a = anthropic.AsyncAnthropic(base_url=gw["hides"], api_key="x", max_retries=0)
        async with a.messages.stream(model=OSS, max_tokens=2000, messages=USER) as ms:
            said = "".join([t async for t in ms.text_stream])
            msg = await ms.get_final_message()
        assert [b.type for b in msg.content] == ["thinking", "text"]
        assert said == msg.content[1].text and "The user is asking" not in said


def test_chunk_reader_takes_either_name_and_reasoning_first_only() -> None:
    """vLLM sends ``reasoning`` (newer) or ``reasoning_content`` (older); reasoning after the
    content began is not a reasoning piece (an encoder's reasoning comes first)."""
    def sse(*deltas: dict[str, Any]) -> bytes:
        return b"".join(b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": d}]})
                        + b"\n\n" for d in deltas) + b"data: [DONE]\n\n"

    reply = LiveReply()
    ChunkReader(reply).feed(sse({"reasoning_content": "Think"}, {"reasoning": " hard."},
                                {"content": "Hi"}, {"reasoning": "late"}, {"content": "!"}))
    assert [p.tool for p in reply.pieces] == [REASONING, REASONING, -1, -1]
    assert reply.reasoning is not None and reply.reasoning.text == "Think hard."
    assert reply.reasoning_tokens == 2 and reply.text == "Hi!"
    whole, _, _ = reply_from_completion(orjson.dumps({
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "Hi", "reasoning_content": "Think it over."}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 6}}))
    assert whole.reasoning is not None and whole.reasoning.text == "Think it over."
    assert whole.reasoning_tokens == len(tokenize("Think it over.")) and whole.text == "Hi"
