"""Prompt caching end to end: OpenAI's automatic caching and Anthropic's breakpoints, with the
official SDKs against a real server, and the edge cases in process. TTFT is compared on the
modeled clock (``time_info``), never on the wall clock."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import anthropic
import httpx
import openai
import pytest

from fastmode.gateway.app import create_app

FAST_BETA = {"anthropic-beta": "fast-mode-2026-02-01"}


def long_text(tokens: int = 4000) -> str:
    """About ``tokens`` tokens of text unique to the caller (so tests don't share a cache)."""
    tag = uuid.uuid4().hex[:8]
    words = " ".join(f"alpha{i % 97} beta gamma" for i in range(tokens // 4))
    return f"[{tag}] {words}"


def modeled_ttft(time_info: dict[str, float]) -> float:
    return time_info["queue_time"] + time_info["prompt_time"]


def cache_counters(url: str) -> dict[tuple[str, str], dict[str, float]]:
    """Per (deployment, replica): the prefix-cache counters of /metrics."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    text = httpx.get(url + "/metrics").text
    pat = re.compile(r'^fastmode_prefix_cache_(query|hit)_tokens_total\{deployment="([^"]+)",'
                     r'replica="([^"]+)"\} (\S+)$', re.M)
    for kind, dep, rep, value in pat.findall(text):
        out.setdefault((dep, rep), {})[kind] = float(value)
    return out


def delta(before: dict, after: dict) -> dict[tuple[str, str], dict[str, float]]:
    return {k: {kind: v - before.get(k, {}).get(kind, 0.0) for kind, v in after[k].items()}
            for k in after}


# -- OpenAI SDK ---------------------------------------------------------------------------------


def test_repeated_long_prompt_is_a_hit_with_lower_ttft_on_the_same_replica(
        live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")
    messages = [{"role": "system", "content": long_text(4000)},
                {"role": "user", "content": "Summarise the notes."}]
    before = cache_counters(live_server)
    first = client.chat.completions.create(model="frontier", messages=messages, max_tokens=5)
    second = client.chat.completions.create(model="frontier", messages=messages, max_tokens=5)
    after = cache_counters(live_server)
    u1, u2 = first.usage, second.usage
    assert u1 is not None and u2 is not None and u1.prompt_tokens > 4000
    assert u1.prompt_tokens_details is not None and u2.prompt_tokens_details is not None
    assert u1.prompt_tokens_details.cached_tokens == 0
    cached = u2.prompt_tokens_details.cached_tokens
    assert cached is not None and cached >= 1024 and cached % 128 == 0
    assert u1.prompt_tokens - cached < 128 + 20  # all but the last message's tail
    # billed as cached input: $5 / $0.50 / $25 per MTok on the standard tier
    fresh = u2.prompt_tokens - cached
    expected = (fresh * 5.0 + cached * 0.5 + u2.completion_tokens * 25.0) / 1e6
    assert u2.model_extra["cost_usd"] == pytest.approx(expected)
    assert modeled_ttft(second.model_extra["time_info"]) < \
        modeled_ttft(first.model_extra["time_info"])
    # the same replica looked both up and served the hit
    moved = {k: v for k, v in delta(before, after).items()
             if k[0] == "standard" and v.get("query")}
    assert len(moved) == 1, moved
    (replica, counts), = moved.items()
    assert counts["query"] == u1.prompt_tokens + u2.prompt_tokens
    assert counts["hit"] == cached


def test_responses_and_streamed_chat_report_cached_tokens(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")
    text = long_text(3000)
    r1 = client.responses.create(model="frontier", input=text, max_output_tokens=4)
    r2 = client.responses.create(model="frontier", input=text, max_output_tokens=4)
    assert r1.usage is not None and r2.usage is not None
    assert r1.usage.input_tokens_details.cached_tokens == 0
    assert r2.usage.input_tokens_details.cached_tokens >= 1024
    stream = client.chat.completions.create(
        model="frontier", messages=[{"role": "user", "content": text}], max_tokens=4,
        stream=True, stream_options={"include_usage": True})
    usage = [c.usage for c in stream if c.usage is not None][-1]
    # Chat and Responses frame the same text alike: the same checkpoints, a hit
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens >= 1024


# -- Anthropic SDK ------------------------------------------------------------------------------


def test_anthropic_breakpoints_write_then_read_and_a_speed_switch_misses(
        live_server: str) -> None:
    client = anthropic.Anthropic(base_url=live_server, api_key="x")
    system = [{"type": "text", "text": long_text(4000), "cache_control": {"type": "ephemeral"}}]
    msgs = [{"role": "user", "content": "What changed?"}]
    w = client.messages.create(model="frontier", max_tokens=5, system=system, messages=msgs)
    r = client.messages.create(model="frontier", max_tokens=5, system=system, messages=msgs)
    f = client.messages.create(model="frontier", max_tokens=5, system=system, messages=msgs,
                               extra_body={"speed": "fast"}, extra_headers=FAST_BETA)
    assert w.usage.cache_creation_input_tokens and w.usage.cache_creation_input_tokens > 4000
    assert w.usage.cache_read_input_tokens == 0
    assert r.usage.cache_read_input_tokens == w.usage.cache_creation_input_tokens
    assert r.usage.cache_creation_input_tokens == 0
    # the whole prompt is input + reads + writes, as Anthropic reports it
    total = w.usage.input_tokens + w.usage.cache_creation_input_tokens
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == total
    # writes cost 1.25x input, reads 0.1x (the standard tier's $0.50)
    cost_w = (w.usage.input_tokens * 5.0 + w.usage.cache_creation_input_tokens * 6.25
              + w.usage.output_tokens * 25.0) / 1e6
    cost_r = (r.usage.input_tokens * 5.0 + r.usage.cache_read_input_tokens * 0.5
              + r.usage.output_tokens * 25.0) / 1e6
    assert w.usage.model_extra["cost_usd"] == pytest.approx(cost_w)
    assert r.usage.model_extra["cost_usd"] == pytest.approx(cost_r)
    assert r.model_extra["time_info"]["prompt_time"] < w.model_extra["time_info"]["prompt_time"]
    # speed: fast is another cache (and another pool): a miss, written again
    assert f.usage.speed == "fast"
    assert f.usage.cache_read_input_tokens == 0
    assert f.usage.cache_creation_input_tokens == w.usage.cache_creation_input_tokens


def test_anthropic_stream_reports_cache_usage(live_server: str) -> None:
    client = anthropic.Anthropic(base_url=live_server, api_key="x")
    system = [{"type": "text", "text": long_text(2500), "cache_control": {"type": "ephemeral",
                                                                          "ttl": "1h"}}]
    msgs = [{"role": "user", "content": "Go on."}]
    client.messages.create(model="frontier", max_tokens=3, system=system, messages=msgs)
    with client.messages.stream(model="frontier", max_tokens=3, system=system,
                                messages=msgs) as stream:
        final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens and final.usage.cache_read_input_tokens > 2000
    assert final.usage.cache_creation_input_tokens == 0


# -- in process ---------------------------------------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app()
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                          timeout=60)
    c.app = app  # type: ignore[attr-defined]
    yield c
    await c.aclose()
    await ctx.__aexit__(None, None, None)


def block(text: str, **control: str) -> dict:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral", **control}}


@pytest.mark.parametrize("system, status_text", [
    ([block("a"), block("b"), block("c"), block("d"), block("e")], "A maximum of 4 blocks"),
    ([block("a", ttl="2h")], "must be '5m' or '1h'"),
    ([block("a"), block("b", ttl="1h")], "must not come after"),
    ([{"type": "text", "text": "a", "cache_control": {"type": "persistent"}}], "ephemeral"),
])
async def test_bad_cache_control_is_an_anthropic_400(client, system, status_text) -> None:
    r = await client.post("/v1/messages", json={
        "model": "frontier", "max_tokens": 5, "system": system,
        "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert status_text in body["error"]["message"]


async def test_short_prompts_are_not_cached_and_top_level_cache_control_marks_the_end(
        client) -> None:
    chat = {"model": "frontier", "max_tokens": 3,
            "messages": [{"role": "user", "content": "short " * 300}]}
    for _ in range(2):
        r = await client.post("/v1/chat/completions", json=chat)
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    body = {"model": "frontier", "max_tokens": 3, "cache_control": {"type": "ephemeral"},
            "messages": [{"role": "user", "content": long_text(2000)}]}
    first = (await client.post("/v1/messages", json=body)).json()["usage"]
    second = (await client.post("/v1/messages", json=body)).json()["usage"]
    assert first["cache_creation_input_tokens"] > 1024 and first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    # without a breakpoint Anthropic caches nothing
    body.pop("cache_control")
    plain = (await client.post("/v1/messages", json=body)).json()["usage"]
    assert plain["cache_read_input_tokens"] == plain["cache_creation_input_tokens"] == 0


async def test_a_longer_conversation_reads_the_prefix_an_earlier_turn_wrote(client) -> None:
    """An agent loop: each turn appends messages; the earlier turn's prompt is a hit."""
    messages = [{"role": "system", "content": long_text(3000)},
                {"role": "user", "content": "Run the tests."}]
    r1 = (await client.post("/v1/chat/completions", json={
        "model": "frontier", "max_tokens": 20, "messages": messages})).json()
    messages += [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "Now fix the failing one."}]
    r2 = (await client.post("/v1/chat/completions", json={
        "model": "frontier", "max_tokens": 20, "messages": messages})).json()
    cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert r1["usage"]["prompt_tokens"] - 128 < cached <= r1["usage"]["prompt_tokens"]
    text = (await client.get("/metrics")).text
    assert "fastmode_prefix_cache_hit_tokens_total" in text
    assert "vllm:prefix_cache_hits" in text
