"""Price eras per model id: the same tiers, billed and labelled per model.

The default config's aliases carry their provider's published prices as data
(``[routes.MODEL]``: ``prices``, ``price_factor``, ``echo``, ``speedup``): Claude Opus 4.6's
fast mode costs 6x, Opus 5's 2x, ``frontier``'s the tier's derived multiple; the multiple is
billed on cache reads and writes too; OpenAI's newer models echo ``"fast"`` where older ones
echo ``"priority"``. Every expected figure is read from the config or the built tiers.
"""

from __future__ import annotations

import json
import tomllib
import uuid
from typing import Any

import httpx
import pytest
import websockets
from conftest import quick_config_text
from pydantic import ValidationError
from test_remote import serve

from fastmode.backends.engine import build
from fastmode.backends.predict import predict_tier
from fastmode.backends.pricing import Prices
from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, load_config
from fastmode.gateway.values.caching import CACHE_WRITE_FACTOR

USER = [{"role": "user", "content": "What changed?"}]
BETA = {"anthropic-beta": "fast-mode-2026-02-01", "anthropic-version": "2023-06-01"}
FULL = {"x-fastmode-fault": "fast-exhausted"}


def cfg(overflow: str = "reject") -> Config:
    raw = tomllib.loads(quick_config_text())
    raw["server"]["fast_overflow"] = overflow
    return Config.model_validate(raw)


@pytest.fixture
async def gw() -> Any:
    app = create_app(cfg("downgrade"))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t", timeout=60) as client:
            yield app, client


def listed(model: str, role: str) -> Prices:
    """The route's list prices times its factor for ``role`` (read from the default config)."""
    route = load_config().routes[model]
    assert route.prices is not None
    return Prices(**route.prices.model_dump()).scaled(route.price_factor.get(role, 1.0))


def anthropic_cost(p: Prices, u: dict[str, Any]) -> float:
    """Anthropic's bill: input, cache writes at 1.25x input (5-minute TTL), reads, output."""
    return (u["input_tokens"] * p.input
            + u["cache_creation_input_tokens"] * p.input * CACHE_WRITE_FACTOR
            + u["cache_read_input_tokens"] * p.cached_input
            + u["output_tokens"] * p.output) / 1e6


def cached_system() -> list[dict[str, Any]]:
    tag = uuid.uuid4().hex[:8]  # a cache of this test's own
    words = " ".join(f"alpha{i % 97} beta gamma" for i in range(1000))
    return [{"type": "text", "text": f"[{tag}] {words}", "cache_control": {"type": "ephemeral"}}]


async def test_a_model_id_carries_its_fast_price_factor(gw) -> None:
    app, c = gw
    tiers = app.state.gateway.spec.tiers
    body = {"messages": USER, "max_tokens": 8, "seed": 2}
    costs = {}
    for model, speed in (("claude-opus-4-6", "fast"), ("claude-opus-5", "fast"),
                         ("claude-opus-5", "standard"), ("frontier", "fast")):
        r = await c.post("/v1/messages", headers=BETA,
                         json={**body, "model": model, "speed": speed})
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        assert u["speed"] == speed
        expected = tiers["fast"].prices if model == "frontier" else listed(model, speed)
        assert u["cost_usd"] == pytest.approx(anthropic_cost(expected, u))
        costs[model, speed] = u["cost_usd"]
    # the same request, the same pool: 6x against 2x, and the derived ~6.2x of frontier
    assert costs["claude-opus-4-6", "fast"] == pytest.approx(3 * costs["claude-opus-5", "fast"])
    assert costs["claude-opus-5", "fast"] == pytest.approx(2 * costs["claude-opus-5", "standard"])
    assert costs["frontier", "fast"] / costs["claude-opus-5", "standard"] == pytest.approx(
        tiers["fast"].derived_price_factor)
    # OpenAI's ultrafast on its launch model: the published 6x of the model's list prices
    r = await c.post("/v1/chat/completions", json={
        "model": "gpt-6-astra", "messages": USER, "max_tokens": 8, "service_tier": "ultrafast"})
    u = r.json()["usage"]
    assert u["cost_usd"] == pytest.approx(listed("gpt-6-astra", "ultrafast").cost(
        u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], u["completion_tokens"]))


@pytest.mark.parametrize("model", ["claude-opus-4-6", "claude-opus-5"])
async def test_the_fast_multiple_is_billed_on_cache_writes_and_reads(gw, model) -> None:
    _, c = gw
    system = cached_system()
    seen: dict[str, list[float]] = {}
    for speed in ("standard", "fast"):
        body = {"model": model, "max_tokens": 4, "seed": 3, "system": system,
                "messages": USER, "speed": speed}
        w = (await c.post("/v1/messages", headers=BETA, json=body)).json()["usage"]
        r = (await c.post("/v1/messages", headers=BETA, json=body)).json()["usage"]
        assert w["cache_creation_input_tokens"] > 1000 and w["cache_read_input_tokens"] == 0
        assert r["cache_read_input_tokens"] == w["cache_creation_input_tokens"]
        for u in (w, r):
            assert u["cost_usd"] == pytest.approx(anthropic_cost(listed(model, speed), u))
        seen[speed] = [w["cost_usd"], r["cost_usd"]]
    factor = load_config().routes[model].price_factor["fast"]
    for standard, fast in zip(seen["standard"], seen["fast"], strict=True):
        assert fast == pytest.approx(factor * standard)  # writes and reads alike


async def test_a_downgraded_request_pays_the_models_standard_prices(gw) -> None:
    _, c = gw
    r = await c.post("/v1/messages", headers={**BETA, **FULL}, json={
        "model": "claude-opus-4-6", "messages": USER, "max_tokens": 5, "speed": "fast"})
    u = r.json()["usage"]
    assert u["speed"] == "standard" and r.headers["x-fastmode-requested-tier"] == "fast"
    assert u["cost_usd"] == pytest.approx(anthropic_cost(listed("claude-opus-4-6", "standard"), u))


async def test_the_fast_echo_follows_the_model(gw) -> None:
    _, c = gw
    for model, echoed in (("gpt-5", "priority"), ("gpt-6-astra", "fast"),
                          ("frontier", "priority")):
        for asked in ("priority", "fast"):
            r = await c.post("/v1/chat/completions", json={
                "model": model, "messages": USER, "max_tokens": 3, "service_tier": asked})
            assert r.json()["service_tier"] == echoed, (model, asked)
            r = await c.post("/v1/responses", json={
                "model": model, "input": "hi", "max_output_tokens": 3, "service_tier": asked})
            assert r.json()["service_tier"] == echoed, (model, asked)
        r = await c.post("/v1/completions", json={
            "model": model, "prompt": "hi", "max_tokens": 3, "service_tier": "fast"})
        assert r.json()["service_tier"] == echoed
        # standard and flex keep the protocol's words on every model
        r = await c.post("/v1/chat/completions", json={
            "model": model, "messages": USER, "max_tokens": 3, "service_tier": "flex"})
        assert r.json()["service_tier"] == "flex"
    # Anthropic's word is "fast" whatever the model: the override is OpenAI's service_tier only
    r = await c.post("/v1/messages", headers=BETA, json={
        "model": "gpt-6-astra", "messages": USER, "max_tokens": 3, "speed": "fast"})
    assert r.json()["usage"]["speed"] == "fast"
    # a downgraded request shows what served
    r = await c.post("/v1/chat/completions", headers=FULL, json={
        "model": "gpt-6-astra", "messages": USER, "max_tokens": 3, "service_tier": "fast"})
    assert r.json()["service_tier"] == "default"


async def test_the_fast_echo_over_the_websocket() -> None:
    async with serve(create_app(cfg()), ws="websockets-sansio") as base:
        url = base.replace("http://", "ws://") + "/v1/responses"
        async with websockets.connect(url, compression=None) as ws:
            for model, echoed in (("gpt-6-astra", "fast"), ("gpt-5", "priority")):
                await ws.send(json.dumps({"type": "response.create", "model": model,
                                          "input": "hi", "max_output_tokens": 3,
                                          "service_tier": "priority"}))
                while True:
                    ev = json.loads(await ws.recv())
                    if ev["type"] in ("response.completed", "response.incomplete", "error"):
                        break
                assert ev["response"]["service_tier"] == echoed


def test_the_published_speedups_are_what_the_tiers_model() -> None:
    """Each alias's published "up to N x" (data) against its tiers' modeled speeds."""
    config = load_config()
    spec = build(config.sim())
    checked = 0
    for model, route in config.routes.items():
        tiers = route.roles()
        base = predict_tier(spec, tiers["standard"])["output_tokens_per_s_per_user"]
        for role, published in route.speedup.items():
            speed = predict_tier(spec, tiers[role])["output_tokens_per_s_per_user"]
            assert speed / base == pytest.approx(published, rel=0.15), (model, role)
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("change, field", [
    ({"price_factor": {"ultrafast": 6.0}}, "price_factor.ultrafast"),  # not offered
    ({"echo": {"fast": {"tier": "fast"}}}, "echo.fast.tier"),  # not a wire parameter
    ({"price_factor": {"fast": 0.0}}, "fast"),
])
def test_a_bad_price_era_is_refused_naming_the_field(change, field) -> None:
    raw = tomllib.loads(quick_config_text())
    raw["routes"]["claude-opus-5"].update(change)
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        Config.model_validate(raw)
