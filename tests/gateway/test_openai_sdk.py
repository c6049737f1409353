"""The gateway driven as a user drives it: a real server, the official openai SDK."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import openai
import pytest
from conftest import SdkClock

from fastmode.backends.mockmodel import validate_arguments
from fastmode.gateway.config import load_config

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
USER = [{"role": "user", "content": "What is the weather in Lyon?"}]


def client(url: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=kw.pop("api_key", "x"), **kw)


def metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(url + "/metrics").text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- the happy paths ------------------------------------------------------------------------


def test_chat_non_streaming(live_server: str) -> None:
    raw = client(live_server).chat.completions.with_raw_response.create(
        model="frontier", messages=USER, max_completion_tokens=30, seed=7
    )
    resp = raw.parse()
    assert raw.headers["x-fastmode-tier"] == "standard"
    assert float(raw.headers["x-fastmode-cost-usd"]) > 0
    assert raw.headers["x-request-id"]
    assert resp.service_tier == "default"
    msg = resp.choices[0].message
    assert msg.role == "assistant" and len(msg.content) > 20
    assert resp.usage.completion_tokens == 30
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 30
    # the price of the tier that served it: $5 in, $25 out per MTok
    expected = (resp.usage.prompt_tokens * 5 + 30 * 25) / 1e6
    assert resp.usage.model_extra["cost_usd"] == pytest.approx(expected)
    info = resp.model_extra["time_info"]
    assert info["total_time"] >= info["prompt_time"] + info["completion_time"] - 1e-9
    # 29 inter-token gaps at ~65 tok/s: the model's pace, without a busy host's slips
    assert 29 / (info["completion_time"] - info["completion_host_lag_time"]) == pytest.approx(
        65, rel=0.1)


def test_streaming_matches_non_streaming_and_reports_usage(live_server: str) -> None:
    c = client(live_server)
    full = c.chat.completions.create(
        model="frontier-spark", messages=USER, max_tokens=60, seed=3
    )
    chunks = list(
        c.chat.completions.create(
            model="frontier-spark", messages=USER, max_tokens=60, seed=3, stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 60
    assert all(ch.usage is None for ch in chunks[:-1])
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finish[-1] == "length" and set(finish[:-1]) == {None}


async def test_async_client_streams(live_server: str) -> None:
    c = openai.AsyncOpenAI(base_url=live_server + "/v1", api_key="x")
    stream = await c.chat.completions.create(
        model="frontier-spark", messages=USER, max_tokens=20, stream=True
    )
    n = 0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            n += 1
    assert n == 20
    await c.close()


def test_tool_calls_validate_on_frontier(quick_server: str) -> None:
    c = client(quick_server)  # what is served, not how fast: the faster hardware
    for seed in range(5):
        resp = c.chat.completions.create(
            model="frontier", messages=USER, tools=[WEATHER], seed=seed, tool_choice="required"
        )
        choice = resp.choices[0]
        assert choice.finish_reason == "tool_calls"
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather"
        assert validate_arguments(WEATHER["function"]["parameters"], call.function.arguments) == []


def test_streamed_tool_call_deltas_merge(live_server: str) -> None:
    stream = client(live_server).chat.completions.create(
        model="frontier-spark", messages=USER, tools=[WEATHER], tool_choice="required",
        stream=True, seed=1,
    )
    args, ids = "", []
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if tc.id:
                ids.append(tc.id)
            args += tc.function.arguments or ""
    assert len(ids) == 1
    json.loads(args)  # seed 1 on spark is not a botched call


def test_responses_stream_helper(live_server: str) -> None:
    c = client(live_server)
    with c.responses.stream(model="frontier-spark", input="Say something",
                            extra_body={"seed": 5}) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert "".join(deltas) == final.output_text
    assert final.usage.output_tokens == len(deltas)
    plain = c.responses.create(model="frontier-spark", input="Say something",
                               extra_body={"seed": 5})
    assert plain.output_text == final.output_text
    # a reply cut by max_output_tokens ends as "incomplete", as OpenAI's does
    cut = c.responses.create(model="frontier-spark", input="Say something",
                             max_output_tokens=5, extra_body={"seed": 5})
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage.output_tokens == 5


def test_responses_function_call(live_server: str) -> None:
    tool = {"type": "function", "name": "get_weather",
            "parameters": WEATHER["function"]["parameters"]}
    resp = client(live_server).responses.create(
        model="frontier", input="Weather in Paris?", tools=[tool], tool_choice="required"
    )
    call = resp.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert validate_arguments(tool["parameters"], call.arguments) == []


def test_fast_routing(live_server: str) -> None:
    fast = openai.OpenAI(base_url=live_server + "/fast/v1", api_key="x")
    raw = fast.chat.completions.with_raw_response.create(
        model="frontier", messages=USER, max_tokens=5
    )
    assert raw.headers["x-fastmode-tier"] == "fast"
    assert raw.parse().service_tier == "priority"
    raw = client(live_server).chat.completions.with_raw_response.create(
        model="frontier", messages=USER, max_tokens=5, service_tier="priority"
    )
    assert raw.headers["x-fastmode-tier"] == "fast"
    # spark is spark on either path
    raw = fast.chat.completions.with_raw_response.create(
        model="frontier-spark", messages=USER, max_tokens=5
    )
    assert raw.headers["x-fastmode-tier"] == "spark"


def test_models(live_server: str) -> None:
    ids = [m.id for m in client(live_server).models.list()]
    # every route of the default config, in its order: the two models, then the aliases
    assert ids == list(load_config().routes) and ids[:2] == ["frontier", "frontier-spark"]
    assert client(live_server).models.retrieve("frontier-spark").id == "frontier-spark"
    with pytest.raises(openai.NotFoundError):
        client(live_server).models.retrieve("nope")


# -- errors ---------------------------------------------------------------------------------


def test_bad_requests(live_server: str) -> None:
    c = client(live_server, max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="no-such-model", messages=USER)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="frontier", messages=[])
    assert e.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="frontier-spark", messages=USER, max_tokens=200_000)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="frontier", messages=USER, n=2)
    assert e.value.param == "n"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="frontier", messages=USER, temperature=5)
    assert e.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="frontier", messages=[{"role": "wizard", "content": "x"}])
    assert e.value.param.startswith("messages[0]")


def test_malformed_json_is_a_400_not_a_500(live_server: str) -> None:
    r = httpx.post(live_server + "/v1/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(live_server + "/v1/chat/completions", json={"messages": USER})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    r = httpx.post(live_server + "/v1/chat/completions", json={"model": 3, "messages": USER})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    r = httpx.post(live_server + "/v1/chat/completions",
                   json={"model": "frontier", "messages": USER, "stream": "yes"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"
    r = httpx.get(live_server + "/v1/nothing-here")
    assert r.status_code == 404 and "error" in r.json()


# -- limits, overload, disconnects (a small pool of our own) ---------------------------------

SMALL = """
[deployments.std]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
max_batch = 4
max_waiting = 0
[deployments.std.background]
occupancy = 0.5
context_tokens = 2000
[deployments.tiny]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
max_batch = 2
max_waiting = 0
[deployments.tiny.background]
occupancy = 0.5
context_tokens = 2000
[tiers.standard]
deployment = "std"
[tiers.standard.prices]
input = 5.0
cached_input = 0.5
output = 25.0
[tiers.fast]
deployment = "tiny"
[server]
fast_overflow = "{overflow}"
retry_after_s = 1
[routes.frontier]
standard = "standard"
fast = "fast"
{auth}
"""


def small(overflow: str = "reject", auth: str = "") -> str:
    return SMALL.replace("{overflow}", overflow).replace("{auth}", auth)


def hold_stream(url: str, path: str = "/fast/v1", tokens: int = 3000):
    """Open a long stream in the background, holding one batch slot; returns (thread, stop)."""
    stop = threading.Event()
    started = threading.Event()

    def run() -> None:
        with httpx.stream("POST", url + path + "/chat/completions", json={
            "model": "frontier", "messages": USER, "max_tokens": tokens, "stream": True,
            "ignore_eos": True,
        }, timeout=30) as r:
            if r.status_code != 200:
                return
            for _ in r.iter_bytes():
                started.set()
                if stop.is_set():
                    break

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert started.wait(10)
    return t, stop


def test_fast_pool_full_is_a_429_the_sdk_retries(server_factory, monkeypatch) -> None:
    """The fast pool full is a 429 whose retry hint is when the held slot frees (the modeled
    end of the stream that holds it, ~10 s away), and the SDK waits exactly that hint before
    retrying. Its waits are recorded, not slept (``SdkClock``): a retry into the still full
    pool is a 429 again and the SDK raises when its retries are spent; a retry after the slot
    was freed (the holder disconnects during the wait) is served."""
    url = server_factory(config_text=small("reject"))
    t, stop = hold_stream(url)
    try:
        before = metric(url, "fastmode_requests_total", tier="fast", status="429")
        fast = openai.OpenAI(base_url=url + "/fast/v1", api_key="x", max_retries=1)
        clock = SdkClock()
        monkeypatch.setattr(openai._base_client, "time", clock)
        with pytest.raises(openai.RateLimitError) as e:
            fast.chat.completions.create(model="frontier", messages=USER, max_tokens=5)
        assert metric(url, "fastmode_requests_total", tier="fast", status="429") - before == 2
        headers = e.value.response.headers
        assert e.value.code == "rate_limit_exceeded"
        hint = int(headers["retry-after-ms"]) / 1000
        assert 1 < hint < 60  # the held stream has thousands of tokens left
        # whole seconds, rounded up (fastmode/gateway/errors.py: ceil of retry-after-ms), at least 1
        assert 0 <= int(headers["retry-after"]) - hint < 1
        # it waited once, for the first answer's hint: a little longer than the last one's
        assert len(clock.waits) == 1 and hint <= clock.waits[0] < hint + 5

        def free_the_slot() -> None:  # the holder goes away while the SDK waits
            stop.set()
            deadline = time.monotonic() + 10
            while metric(url, "fastmode_replica_running", deployment="tiny") != 0:
                assert time.monotonic() < deadline, "slot not freed after disconnect"
                time.sleep(0.02)

        clock = SdkClock(free_the_slot)
        monkeypatch.setattr(openai._base_client, "time", clock)
        raw = fast.chat.completions.with_raw_response.create(
            model="frontier", messages=USER, max_tokens=5)
        assert raw.http_response.status_code == 200 and raw.headers["x-fastmode-tier"] == "fast"
        assert raw.retries_taken == 1 and len(clock.waits) == 1 and 1 < clock.waits[0] < 60
        assert metric(url, "fastmode_requests_total", tier="fast", status="429") - before == 3
    finally:
        stop.set()
        t.join(10)


def test_fast_pool_full_downgrades_and_bills_standard(server_factory) -> None:
    url = server_factory(config_text=small("downgrade"))
    t, stop = hold_stream(url)
    try:
        fast = openai.OpenAI(base_url=url + "/fast/v1", api_key="x", max_retries=0)
        raw = fast.chat.completions.with_raw_response.create(
            model="frontier", messages=USER, max_tokens=5
        )
        resp = raw.parse()
        assert raw.headers["x-fastmode-tier"] == "standard"
        assert raw.headers["x-fastmode-requested-tier"] == "fast"
        assert resp.service_tier == "default"
        assert resp.usage.model_extra["cost_usd"] == pytest.approx(
            (resp.usage.prompt_tokens * 5 + 5 * 25) / 1e6
        )
    finally:
        stop.set()
        t.join(10)


def test_overload_is_a_503(server_factory) -> None:
    url = server_factory(config_text=small())
    holders = [hold_stream(url, "/v1") for _ in range(2)]  # std has 2 free slots
    try:
        c = client(url, max_retries=0)
        with pytest.raises(openai.InternalServerError) as e:
            c.chat.completions.create(model="frontier", messages=USER, max_tokens=5)
        assert e.value.status_code == 503
        assert e.value.code == "server_is_overloaded"
    finally:
        for t, stop in holders:
            stop.set()
            t.join(10)


def test_disconnect_frees_the_slot(server_factory) -> None:
    url = server_factory(config_text=small())
    t, stop = hold_stream(url, "/fast/v1", tokens=3000)
    assert metric(url, "fastmode_replica_running", deployment="tiny") == 1
    stop.set()
    t.join(10)
    deadline = time.monotonic() + 5
    while metric(url, "fastmode_replica_running", deployment="tiny") != 0:
        assert time.monotonic() < deadline, "slot not freed after disconnect"
        time.sleep(0.05)
    # the cut-short request is counted once, for the tokens that reached the client
    assert metric(url, "fastmode_cancelled_total", tier="fast") == 1
    out = metric(url, "fastmode_output_tokens_total", tier="fast")
    assert 0 < out < 3000
    # and the slot is usable again
    fast = openai.OpenAI(base_url=url + "/fast/v1", api_key="x", max_retries=0)
    assert fast.chat.completions.create(model="frontier", messages=USER, max_tokens=3)


AUTH = """
[auth]
enabled = true
[[auth.keys]]
key = "sk-standard-only"
tiers = ["standard"]
[[auth.keys]]
key = "sk-all"
[auth.keys.limits.fast]
requests_per_minute = 2
"""


def test_auth_and_rate_limits(server_factory) -> None:
    url = server_factory(config_text=small(auth=AUTH))
    with pytest.raises(openai.AuthenticationError) as e:
        client(url, api_key="wrong", max_retries=0).chat.completions.create(
            model="frontier", messages=USER, max_tokens=2)
    assert e.value.code == "invalid_api_key"
    std = client(url, api_key="sk-standard-only", max_retries=0)
    assert std.chat.completions.create(model="frontier", messages=USER, max_tokens=2)
    with pytest.raises(openai.PermissionDeniedError) as e:
        std.chat.completions.create(model="frontier", messages=USER, max_tokens=2,
                                    service_tier="priority")
    assert e.value.code == "tier_not_allowed"
    fast = openai.OpenAI(base_url=url + "/fast/v1", api_key="sk-all", max_retries=0)
    for _ in range(2):
        raw = fast.chat.completions.with_raw_response.create(
            model="frontier", messages=USER, max_tokens=2)
        assert raw.headers["x-ratelimit-limit-requests"] == "2"
    with pytest.raises(openai.RateLimitError) as e:
        fast.chat.completions.create(model="frontier", messages=USER, max_tokens=2)
    assert re.fullmatch(r"\d+", e.value.response.headers["retry-after"])
    assert e.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    # the standard tier has its own bucket
    assert client(url, api_key="sk-all").chat.completions.create(
        model="frontier", messages=USER, max_tokens=2)
