"""OpenAI's ``ultrafast`` service tier in the default config, on every protocol.

One vocabulary row and a route: ``service_tier: "ultrafast"`` (Chat, Completions, Responses
over SSE and the websocket; ``speed: "ultrafast"`` on Messages, a fastmode extension) is routed
to the ultrafast tier and echoed ``"ultrafast"``; it is a premium role with its own bucket of
the key's limits (Anthropic's ``anthropic-fast-*`` headers); a full pool downgrades to standard
and is billed standard; a model without the tier refuses it; a remote ultrafast tier is
admitted on the same path. Prices are the tiers' (derived from hardware), never typed here.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import websockets
from conftest import quick_config_text
from test_remote import Fake, serve

from fastmode.backends.pricing import Prices
from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config

USER = [{"role": "user", "content": "Name three rivers of France."}]
BETA = {"anthropic-beta": "fast-mode-2026-02-01", "anthropic-version": "2023-06-01"}
FULL = {"x-fastmode-fault": "fast-exhausted"}  # the premium pool acts as if it were full
# the key's limits: ultrafast has its own bucket, apart from fast's
LIMITS = {"ultrafast": {"requests_per_minute": 3, "input_tokens_per_minute": 400_000,
                        "output_tokens_per_minute": 7_000},
          "fast": {"requests_per_minute": 50, "input_tokens_per_minute": 400_000,
                   "output_tokens_per_minute": 20_000}}


def config(key: str, overflow: str = "reject", remote: dict[str, Any] | None = None,
           limits: dict[str, Any] | None = None) -> Config:
    raw = tomllib.loads(quick_config_text())
    raw["server"]["fast_overflow"] = overflow
    # buckets live in the process's shared state file: every test has a key of its own
    raw["auth"] = {"enabled": True, "keys": [{"key": key, "limits": limits or {}}]}
    if remote:
        raw["remote"] = {"health_interval_s": 60, "health_timeout_s": 0.5, "tiers": remote}
    return Config.model_validate(raw)


@asynccontextmanager
async def running(cfg: Config) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    app = create_app(cfg)
    async with app.router.lifespan_context(app):
        key = cfg.auth.keys[0].key
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                     timeout=60, headers={"authorization": f"Bearer {key}",
                                                          "x-api-key": key}) as client:
            yield app, client


def prices(app: Any, tier: str) -> Prices:
    return app.state.gateway.spec.tiers[tier].prices


def openai_cost(p: Prices, usage: dict[str, Any]) -> float:
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    out = usage.get("completion_tokens", usage.get("output_tokens"))
    return p.cost(prompt, details.get("cached_tokens", 0), out)


def anthropic_cost(p: Prices, usage: dict[str, Any]) -> float:
    assert usage["cache_creation_input_tokens"] == 0  # no cache_control here
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    return p.cost(prompt, usage["cache_read_input_tokens"], usage["output_tokens"])


def sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def final(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The response of a Responses stream's terminal event (a short cap ends it incomplete)."""
    (end,) = [e for e in events if e["type"] in ("response.completed", "response.incomplete")]
    return end["response"]


async def test_ultrafast_is_routed_echoed_and_billed_on_every_http_protocol() -> None:
    async with running(config("k-route", limits={"ultrafast": {"requests_per_minute": 100}})
                       ) as (app, c):
        ultra = prices(app, "ultrafast")
        body = {"model": "frontier", "messages": USER, "max_tokens": 6, "seed": 1,
                "service_tier": "ultrafast"}
        r = await c.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["service_tier"] == "ultrafast"
        assert r.headers["x-fastmode-tier"] == "ultrafast"
        assert r.json()["usage"]["cost_usd"] == pytest.approx(openai_cost(ultra, r.json()["usage"]))
        r = await c.post("/v1/chat/completions", json={
            **body, "stream": True, "stream_options": {"include_usage": True}})
        chunks = sse(r.text)
        assert {ch["service_tier"] for ch in chunks} == {"ultrafast"}
        assert chunks[-1]["usage"]["cost_usd"] == pytest.approx(
            openai_cost(ultra, chunks[-1]["usage"]))
        r = await c.post("/v1/completions", json={"model": "frontier", "prompt": "Rivers:",
                                                  "max_tokens": 4, "service_tier": "ultrafast"})
        assert r.status_code == 200 and r.json()["service_tier"] == "ultrafast"
        rbody = {"model": "frontier", "input": "Name three rivers.", "max_output_tokens": 6,
                 "service_tier": "ultrafast"}
        r = await c.post("/v1/responses", json=rbody)
        assert r.status_code == 200 and r.json()["service_tier"] == "ultrafast"
        r = await c.post("/v1/responses", json={**rbody, "stream": True})
        done = final(sse(r.text))
        assert done["service_tier"] == "ultrafast"
        assert done["usage"]["cost_usd"] == pytest.approx(openai_cost(ultra, done["usage"]))
        mbody = {"model": "frontier", "messages": USER, "max_tokens": 6, "speed": "ultrafast"}
        r = await c.post("/v1/messages", headers=BETA, json=mbody)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["speed"] == "ultrafast"
        assert r.json()["usage"]["cost_usd"] == pytest.approx(
            anthropic_cost(ultra, r.json()["usage"]))
        r = await c.post("/v1/messages", headers=BETA, json={**mbody, "stream": True})
        start = [e for e in sse(r.text) if e["type"] == "message_start"][0]
        assert start["message"]["usage"]["speed"] == "ultrafast"
        # GET /v1/models lists the role where the model offers it
        cards = {m["id"]: m for m in (await c.get("/v1/models")).json()["data"]}
        assert "ultrafast" in cards["frontier"]["roles"]
        assert "ultrafast" in cards["gpt-6-astra"]["roles"]
        assert "ultrafast" not in cards["claude-opus-4-6"]["roles"]


async def test_a_model_without_the_tier_refuses_it_in_its_format() -> None:
    async with running(config("k-refuse")) as (_, c):
        for model in ("frontier-spark", "claude-opus-5"):
            r = await c.post("/v1/chat/completions", json={
                "model": model, "messages": USER, "max_tokens": 3, "service_tier": "ultrafast"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "service_tier"
            # a word the protocol knows, on a model that does not offer it
            assert f"not available for the model `{model}`" in r.json()["error"]["message"]
        r = await c.post("/v1/messages", headers=BETA, json={
            "model": "claude-opus-4-6", "messages": USER, "max_tokens": 3, "speed": "ultrafast"})
        assert r.status_code == 400 and r.json()["type"] == "error"
        assert "speed 'ultrafast' is not available" in r.json()["error"]["message"]


async def test_ultrafast_takes_its_own_bucket_of_the_keys_limits() -> None:
    async with running(config("k-limits", limits=LIMITS)) as (_, c):
        r = await c.post("/v1/messages", headers=BETA, json={
            "model": "frontier", "messages": USER, "max_tokens": 50, "speed": "ultrafast"})
        assert r.status_code == 200
        # a premium role: Anthropic's fast-mode headers, with the ultrafast bucket's figures
        assert r.headers["anthropic-fast-output-tokens-limit"] == "7000"
        assert r.headers["anthropic-fast-output-tokens-remaining"] == str(7000 - 50)
        r = await c.post("/v1/messages", headers=BETA, json={
            "model": "frontier", "messages": USER, "max_tokens": 50, "speed": "fast"})
        assert r.headers["anthropic-fast-output-tokens-limit"] == "20000"
        body = {"model": "frontier", "messages": USER, "max_tokens": 3,
                "service_tier": "ultrafast"}
        for left in ("1", "0"):
            r = await c.post("/v1/chat/completions", json=body)
            assert r.status_code == 200 and r.headers["x-ratelimit-limit-requests"] == "3"
            assert r.headers["x-ratelimit-remaining-requests"] == left
        r = await c.post("/v1/chat/completions", json=body)
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
        assert float(r.headers["retry-after"]) > 0
        # fast and standard have buckets of their own
        r = await c.post("/v1/chat/completions", json={**body, "service_tier": "fast"})
        assert r.status_code == 200 and r.json()["service_tier"] == "priority"
        r = await c.post("/v1/chat/completions", json={**body, "service_tier": "auto"})
        assert r.status_code == 200


async def test_a_full_ultrafast_pool_downgrades_and_bills_standard() -> None:
    async with running(config("k-down", overflow="downgrade")) as (app, c):
        std = prices(app, "standard")
        body = {"model": "frontier", "messages": USER, "max_tokens": 5,
                "service_tier": "ultrafast"}
        r = await c.post("/v1/chat/completions", json=body, headers=FULL)
        assert r.status_code == 200
        assert r.json()["service_tier"] == "default"  # what served
        assert r.headers["x-fastmode-tier"] == "standard"
        assert r.headers["x-fastmode-requested-tier"] == "ultrafast"
        assert r.json()["usage"]["cost_usd"] == pytest.approx(openai_cost(std, r.json()["usage"]))
        r = await c.post("/v1/responses", headers=FULL, json={
            "model": "frontier", "input": "hi", "max_output_tokens": 5,
            "service_tier": "ultrafast", "stream": True})
        done = final(sse(r.text))
        assert done["service_tier"] == "default"
        assert done["usage"]["cost_usd"] == pytest.approx(openai_cost(std, done["usage"]))
        r = await c.post("/v1/messages", headers={**BETA, **FULL}, json={
            "model": "frontier", "messages": USER, "max_tokens": 5, "speed": "ultrafast"})
        assert r.status_code == 200 and r.json()["usage"]["speed"] == "standard"
        assert r.json()["usage"]["cost_usd"] == pytest.approx(
            anthropic_cost(std, r.json()["usage"]))
    async with running(config("k-reject")) as (_, c):
        r = await c.post("/v1/chat/completions", json=body, headers=FULL)
        assert r.status_code == 429 and "ultrafast tier is at capacity" in r.json()["error"][
            "message"]


async def ws_turn(ws: Any, **create: Any) -> dict[str, Any]:
    await ws.send(json.dumps({"type": "response.create", "model": "frontier", "input": "hi",
                              "max_output_tokens": 5, **create}))
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if ev["type"] in ("response.completed", "response.incomplete", "error"):
            return ev


async def test_ultrafast_over_the_websocket() -> None:
    cfg = config("k-ws", overflow="downgrade", limits={"ultrafast": {"requests_per_minute": 2}})
    app = create_app(cfg)
    async with serve(app, ws="websockets-sansio") as base:
        url = base.replace("http://", "ws://") + "/v1/responses"
        auth = {"Authorization": "Bearer k-ws"}
        async with websockets.connect(url, compression=None, additional_headers=auth) as ws:
            ev = await ws_turn(ws, service_tier="ultrafast")
            assert ev["type"] != "error"
            assert ev["response"]["service_tier"] == "ultrafast"
            ultra = app.state.gateway.spec.tiers["ultrafast"].prices
            assert ev["response"]["usage"]["cost_usd"] == pytest.approx(
                openai_cost(ultra, ev["response"]["usage"]))
            # the turns of a socket take from the key's ultrafast bucket like any request
            assert (await ws_turn(ws, service_tier="ultrafast"))["type"] != "error"
            ev = await ws_turn(ws, service_tier="ultrafast")
            assert ev["type"] == "error" and ev["status"] == 429
            assert ev["error"]["code"] == "rate_limit_exceeded"
            assert (await ws_turn(ws))["response"]["service_tier"] == "default"  # still open
    # a socket whose ultrafast pool is full: downgraded, echoed as what served, billed standard
    app = create_app(config("k-ws-full", overflow="downgrade"))
    async with serve(app, ws="websockets-sansio") as base:
        url = base.replace("http://", "ws://") + "/v1/responses"
        async with websockets.connect(url, compression=None, additional_headers={
                "Authorization": "Bearer k-ws-full", **FULL}) as ws:
            ev = await ws_turn(ws, service_tier="ultrafast")
            assert ev["response"]["service_tier"] == "default"
            std = app.state.gateway.spec.tiers["standard"].prices
            assert ev["response"]["usage"]["cost_usd"] == pytest.approx(
                openai_cost(std, ev["response"]["usage"]))


async def test_a_remote_ultrafast_tier_is_admitted_on_the_same_path() -> None:
    fake = Fake()
    async with serve(fake.app) as up:
        cfg = config("k-remote", overflow="downgrade", remote={"ultrafast": {"upstreams": [up]}},
                     limits=LIMITS)
        app = create_app(cfg)
        async with serve(app) as url, httpx.AsyncClient(
                base_url=url, timeout=30, headers={"authorization": "Bearer k-remote",
                                                   "x-api-key": "k-remote"}) as c:
            r = await c.post("/v1/chat/completions", json={
                "model": "frontier", "messages": USER, "max_tokens": 5,
                "service_tier": "ultrafast"})
            assert r.status_code == 200, r.text
            assert r.headers["x-fastmode-upstream"] == up
            assert r.json()["service_tier"] == "ultrafast"
            ultra = app.state.gateway.spec.tiers["ultrafast"].prices
            # the upstream's counts, priced by the gateway at the tier that served
            assert r.json()["usage"]["cost_usd"] == pytest.approx(
                openai_cost(ultra, r.json()["usage"]))
            r = await c.post("/v1/messages", headers=BETA, json={
                "model": "frontier", "messages": USER, "max_tokens": 40, "speed": "ultrafast"})
            assert r.status_code == 200 and r.json()["usage"]["speed"] == "ultrafast"
            assert r.headers["anthropic-fast-output-tokens-limit"] == "7000"
            fake.mode = "503"  # every upstream busy: downgraded to the in-process standard tier
            r = await c.post("/v1/chat/completions", json={
                "model": "frontier", "messages": USER, "max_tokens": 5,
                "service_tier": "ultrafast"})
            assert r.status_code == 200 and r.json()["service_tier"] == "default"
            assert r.headers["x-fastmode-requested-tier"] == "ultrafast"
            assert "x-fastmode-upstream" not in r.headers
