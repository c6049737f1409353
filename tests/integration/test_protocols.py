"""Every protocol through the engines, and two gateway replicas sharing their state (Redis).

The compose topology: gateway-1 and gateway-2 (``FASTMODE_GATEWAY_URL``,
``FASTMODE_GATEWAY_2_URL``) in front of the engine services. The gateways translate the
Responses API (SSE, non-streamed, websocket) and Anthropic Messages to the engines' Chat
Completions; a response made on one gateway is continued on the other; usage is summed.
"""

from __future__ import annotations

import os
import time

import anthropic
import httpx
import openai
import pytest

from .conftest import metric_sum, metrics, upstreams

pytestmark = pytest.mark.integration

GATEWAY_2_URL = os.environ.get("FASTMODE_GATEWAY_2_URL", "").rstrip("/")
WEATHER = {"type": "function", "name": "get_weather", "description": "weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


@pytest.fixture(scope="session")
def gateway_2_url() -> str:
    if not GATEWAY_2_URL:
        pytest.fail("no second gateway: set FASTMODE_GATEWAY_2_URL (docker-compose.yml)")
    return GATEWAY_2_URL


def sdk(url: str, path: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + path, api_key="sk-test", max_retries=0, timeout=60)


def engine_output(gateway: str, tier: str) -> float:
    """Output tokens the engines of a tier have counted (their own /metrics)."""
    return sum(metric_sum(metrics(u), "fastmode_output_tokens_total")
               for u in upstreams(gateway)[tier])


@pytest.mark.parametrize("path,tier", [("/v1", "standard"), ("/fast/v1", "fast")])
def test_responses_non_streamed_and_streamed(gateway_url: str, path: str, tier: str) -> None:
    client = sdk(gateway_url, path)
    before = engine_output(gateway_url, tier)
    raw = client.responses.with_raw_response.create(
        model="frontier", input="Explain KV caches", max_output_tokens=30,
        extra_body={"seed": 4})
    whole = raw.parse()
    assert raw.headers["x-fastmode-tier"] == tier and raw.headers["x-fastmode-upstream"]
    assert whole.output_text and whole.usage.output_tokens <= 30
    text, final = "", None
    with client.responses.stream(model="frontier", input="Explain KV caches",
                                 max_output_tokens=30, extra_body={"seed": 4}) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response  # incomplete: the reply reached max_output_tokens
    assert final is not None
    assert text == whole.output_text == final.output_text  # same seed, same engine reply
    cost = final.usage.model_extra["cost_usd"]
    assert cost > 0 and cost == pytest.approx(whole.usage.model_extra["cost_usd"])
    # the engines generated what the gateway billed
    assert engine_output(gateway_url, tier) - before == 2 * final.usage.output_tokens


def test_responses_tool_call_on_spark(gateway_url: str) -> None:
    resp = sdk(gateway_url).responses.create(
        model="frontier-spark", input="What is the weather in Lyon?", tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"}, extra_body={"seed": 2})
    call = resp.output[0]
    assert call.type == "function_call" and call.name == "get_weather"


def test_continued_across_the_two_gateways(gateway_url: str, gateway_2_url: str) -> None:
    first = sdk(gateway_url).responses.create(model="frontier", input="Remember: teal.",
                                              max_output_tokens=10)
    second = sdk(gateway_2_url).responses.create(model="frontier", input="Which colour?",
                                                 max_output_tokens=10,
                                                 previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_websocket_turns_through_the_engines(gateway_url: str) -> None:
    client = sdk(gateway_url, "/fast/v1")
    with client.responses.connect() as conn:
        conn.response.create(model="frontier", input="Run the tests", max_output_tokens=20)
        first = None
        for event in conn:
            if event.type in ("response.completed", "response.incomplete"):
                first = event.response
                break
        assert first is not None and first.service_tier == "priority" and first.output_text
        conn.response.create(model="frontier", input="And lint", max_output_tokens=20,
                             previous_response_id=first.id)
        for event in conn:
            if event.type in ("response.completed", "response.incomplete"):
                assert event.response.usage.output_tokens > 0
                break


@pytest.mark.parametrize("fast", [False, True])
def test_anthropic_messages(gateway_url: str, fast: bool) -> None:
    client = anthropic.Anthropic(base_url=gateway_url, api_key="sk-test", max_retries=0,
                                 timeout=60)
    extra = ({"extra_body": {"speed": "fast"},
              "extra_headers": {"anthropic-beta": "fast-mode-2026-02-01"}} if fast else {})
    msg = client.messages.create(model="frontier", max_tokens=25, **extra,
                                 messages=[{"role": "user", "content": "Explain batching"}])
    assert msg.content[0].text and msg.usage.speed == ("fast" if fast else "standard")
    with client.messages.stream(model="frontier", max_tokens=25, **extra,
                                messages=[{"role": "user", "content": "Explain batching"}]
                                ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0


def test_usage_summed_over_both_gateways(gateway_url: str, gateway_2_url: str) -> None:
    def total() -> int:
        rows = httpx.get(gateway_url + "/v1/usage", timeout=10).json()["data"]
        return sum(r["requests"] for r in rows)

    before = total()
    for url in (gateway_url, gateway_2_url, gateway_2_url):
        sdk(url).chat.completions.create(model="frontier-spark", max_completion_tokens=3,
                                         messages=[{"role": "user", "content": "hi"}])
    deadline = time.monotonic() + 10
    while total() < before + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert total() == before + 3  # gateway-1 reports gateway-2's requests too
