"""Every tier name the providers use: OpenAI's ``service_tier`` values and what the response
echoes, the flex tier (slower, about half the price, 429 when busy), prices set per tier, and
Anthropic's fast-mode rate-limit headers beside the standard ``anthropic-ratelimit-*`` ones."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import httpx
import openai
import pytest

from fastmode.backends.engine import build
from fastmode.backends.mockmodel import GenerationRequest
from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, load_config
from fastmode.gateway.values.request import TurnRequest

USER = [{"role": "user", "content": "What is the weather in Lyon?"}]
FAST_BETA = {"anthropic-beta": "fast-mode-2026-02-01"}


@pytest.mark.parametrize("asked, echoed, tier", [
    ("auto", "default", "standard"),
    ("default", "default", "standard"),
    ("scale", "default", "standard"),  # no Scale Tier units: served as default
    ("priority", "priority", "fast"),
    ("fast", "priority", "fast"),  # OpenAI shows priority for both spellings
    ("flex", "flex", "flex"),
])
def test_service_tier_echoes_what_served(live_server: str, asked: str, echoed: str,
                                         tier: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")
    raw = client.chat.completions.with_raw_response.create(
        model="frontier", messages=USER, max_tokens=3, service_tier=asked)
    chat = raw.parse()
    assert chat.service_tier == echoed
    assert raw.headers["x-fastmode-tier"] == tier
    resp = client.responses.create(model="frontier", input="hi", max_output_tokens=3,
                                   service_tier=asked)
    assert resp.service_tier == echoed


def test_flex_is_slower_and_about_half_the_price(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x")

    def run(tier: str):
        c = client.chat.completions.create(model="frontier", messages=USER, max_tokens=40,
                                           service_tier=tier, extra_body={"ignore_eos": True})
        info = c.model_extra["time_info"]
        # the model's pace, without a busy host's slips
        return (c.usage.model_extra["cost_usd"],
                (info["completion_time"] - info["completion_host_lag_time"]) / 39)

    std_cost, std_itl = run("default")
    flex_cost, flex_itl = run("flex")
    assert flex_itl > std_itl  # a larger batch: longer steps
    assert 0.4 < flex_cost / std_cost < 0.6  # derived from hardware cost per token


def test_flex_for_a_model_without_a_flex_tier_is_a_400(live_server: str) -> None:
    client = openai.OpenAI(base_url=live_server + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="frontier-spark", messages=USER, max_tokens=3,
                                       service_tier="flex")
    assert exc.value.body["param"] == "service_tier"


def test_default_config_prices_and_explicit_price_factor() -> None:
    spec = build(load_config().sim())
    std, flex = spec.tiers["standard"].prices, spec.tiers["flex"].prices
    assert spec.tiers["flex"].derived_price_factor == pytest.approx(0.5, abs=0.05)
    assert flex.output == pytest.approx(std.output * spec.tiers["flex"].derived_price_factor)
    raw = load_config().model_dump()
    raw["tiers"]["fast"]["price_factor"] = 2.0  # a provider charging 2x, not the derived ~6x
    fast = build(Config.model_validate(raw).sim()).tiers["fast"]
    assert fast.prices.output == pytest.approx(2 * std.output)
    assert fast.derived_price_factor is None


# -- in process: a small flex pool, auth with per-tier limits ------------------------------------

SMALL = """
[deployments.std]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
max_batch = 8
[deployments.std.background]
occupancy = 0.5
context_tokens = 2000
[deployments.lowbatch]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
max_batch = 4
[deployments.lowbatch.background]
occupancy = 0.5
context_tokens = 2000
[deployments.flexpool]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
max_batch = 4
max_waiting = 0
[deployments.flexpool.background]
occupancy = 0.5
context_tokens = 2000
[tiers.standard]
deployment = "std"
[tiers.standard.prices]
input = 5.0
cached_input = 0.5
output = 25.0
[tiers.fast]
deployment = "lowbatch"
[tiers.flex]
deployment = "flexpool"
[routes.frontier]
standard = "standard"
fast = "fast"
flex = "flex"
[auth]
enabled = true
[[auth.keys]]
key = "k1"
[auth.keys.limits.fast]
requests_per_minute = 100
input_tokens_per_minute = 100000
output_tokens_per_minute = 20000
[auth.keys.limits.standard]
requests_per_minute = 100
tokens_per_minute = 200000
"""


@pytest.fixture
async def small_app(tmp_path) -> AsyncIterator[tuple]:
    path = tmp_path / "c.toml"
    path.write_text(SMALL)
    app = create_app(load_config(path))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                               timeout=60)
    yield app, client
    await client.aclose()
    await ctx.__aexit__(None, None, None)


async def test_flex_answers_429_when_its_pool_is_busy(small_app) -> None:
    app, client = small_app
    gw = app.state.gateway
    gen = GenerationRequest(messages=USER, ignore_eos=True)
    held = [await gw.admit(TurnRequest("frontier", "flex", gen, 20, 3000, True, "Bearer k1"))
            for _ in range(2)]  # the 2 free slots
    body = {"model": "frontier", "messages": USER, "max_tokens": 3, "service_tier": "flex"}
    r = await client.post("/v1/chat/completions", json=body,
                          headers={"authorization": "Bearer k1"})
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "resource_unavailable"
    assert float(r.headers["retry-after"]) > 0
    body["service_tier"] = "auto"  # the standard pool still serves
    r = await client.post("/v1/chat/completions", json=body,
                          headers={"authorization": "Bearer k1"})
    assert r.status_code == 200 and r.json()["service_tier"] == "default"
    for job in held:
        gw.settle(job, 499)


async def test_anthropic_fast_mode_rate_limit_headers(small_app) -> None:
    _, client = small_app
    msg = {"model": "frontier", "max_tokens": 50, "messages": USER, "speed": "fast"}
    r = await client.post("/v1/messages", json=msg, headers={"x-api-key": "k1", **FAST_BETA})
    assert r.status_code == 200 and r.json()["usage"]["speed"] == "fast"
    h = r.headers
    assert h["anthropic-fast-input-tokens-limit"] == "100000"
    assert h["anthropic-fast-output-tokens-limit"] == "20000"
    assert int(h["anthropic-fast-output-tokens-remaining"]) == 20000 - 50  # max_tokens
    assert h["anthropic-fast-input-tokens-reset"].endswith("Z")
    assert h["anthropic-ratelimit-requests-limit"] == "100"
    assert not any(k.startswith("x-ratelimit-") for k in h)
    std = await client.post("/v1/messages", json={**msg, "speed": "standard"},
                            headers={"x-api-key": "k1"})
    assert std.headers["anthropic-ratelimit-tokens-limit"] == "200000"
    assert not any(k.startswith("anthropic-fast-") for k in std.headers)
    chat = await client.post("/v1/chat/completions", headers={"authorization": "Bearer k1"},
                             json={"model": "frontier", "messages": USER, "max_tokens": 3})
    assert chat.headers["x-ratelimit-limit-tokens"] == "200000"
    assert not any(k.startswith("anthropic-") for k in chat.headers)


async def test_anthropic_fast_output_limit_is_a_429_with_its_headers(small_app) -> None:
    _, client = small_app
    msg = {"model": "frontier", "max_tokens": 30_000, "messages": USER, "speed": "fast"}
    r = await client.post("/v1/messages", json=msg, headers={"x-api-key": "k1", **FAST_BETA})
    assert r.status_code == 429
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert "output tokens" in r.json()["error"]["message"]
    assert r.headers["anthropic-fast-output-tokens-limit"] == "20000"


def test_anthropic_sdk_reads_speed_and_the_sdk_sees_the_fast_headers(live_server) -> None:
    client = anthropic.Anthropic(base_url=live_server, api_key="x")
    raw = client.messages.with_raw_response.create(
        model="frontier", max_tokens=5, messages=USER, extra_body={"speed": "fast"},
        extra_headers=FAST_BETA)
    assert raw.parse().usage.speed == "fast" and raw.headers["x-fastmode-tier"] == "fast"
