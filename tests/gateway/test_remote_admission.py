"""Remote tiers are admitted on the same path as in-process ones: the same limits
and headers, the same downgrade rule, and a pool whose upstreams are all down answers 503 in
the route's own format — never an answer simulated in process."""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from conftest import bound_socket
from test_remote import Fake, serve

from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, default_config_text

USER = [{"role": "user", "content": "hello"}]
FAST_BETA = {"anthropic-beta": "fast-mode-2026-02-01", "anthropic-version": "2023-06-01"}


def config(tiers: dict[str, list[str]], **server: Any) -> Config:
    raw = tomllib.loads(default_config_text())
    raw["remote"] = {"health_interval_s": 60, "health_timeout_s": 0.5,
                     "tiers": {t: {"upstreams": ups} for t, ups in tiers.items()}}
    raw["server"].update(server)
    raw["auth"] = {"enabled": True, "keys": [{"key": "k1", "limits": {
        "fast": {"requests_per_minute": 2, "input_tokens_per_minute": 100000,
                 "output_tokens_per_minute": 20000},
        "flex": {"requests_per_minute": 100}}}]}
    return Config.model_validate(raw)


@pytest.fixture
async def down() -> AsyncIterator[str]:
    with bound_socket() as nobody:  # bound, never listening: connections to it are refused
        yield f"http://127.0.0.1:{nobody.getsockname()[1]}"


async def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=app, timeout=30,
                             headers={"authorization": "Bearer k1", "x-api-key": "k1"})


async def test_a_remote_flex_pool_that_is_down_is_a_503_not_an_in_process_answer(down) -> None:
    app = create_app(config({"flex": [down], "fast": [down]}))
    async with serve(app) as url, await client_for(url) as c:
        r = await c.post("/v1/chat/completions", json={
            "model": "frontier", "messages": USER, "max_tokens": 3, "service_tier": "flex"})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "upstream_unavailable"
        assert r.headers["retry-after"]
        r = await c.post("/v1/responses", json={"model": "frontier", "input": "hi",
                                                "service_tier": "flex"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_unavailable"
        # Anthropic's format on /v1/messages (its fast pool is remote and down too)
        r = await c.post("/v1/messages", headers=FAST_BETA, json={
            "model": "frontier", "messages": USER, "max_tokens": 3, "speed": "fast"})
        assert r.status_code == 503
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
        # the standard tier is in process and still serves
        r = await c.post("/v1/chat/completions", json={
            "model": "frontier", "messages": USER, "max_tokens": 3})
        assert r.status_code == 200 and r.json()["service_tier"] == "default"


async def test_a_remote_fast_tier_takes_the_keys_limits_with_fast_headers() -> None:
    fake = Fake()
    async with serve(fake.app) as up:
        app = create_app(config({"fast": [up]}))
        async with serve(app) as url, await client_for(url) as c:
            r = await c.post("/v1/messages", headers=FAST_BETA, json={
                "model": "frontier", "messages": USER, "max_tokens": 50, "speed": "fast"})
            assert r.status_code == 200, r.text
            assert r.headers["x-fastmode-upstream"] == up
            assert r.json()["usage"]["speed"] == "fast"
            # the same arguments as an in-process take: requests, input and output tokens
            assert r.headers["anthropic-fast-output-tokens-limit"] == "20000"
            assert int(r.headers["anthropic-fast-output-tokens-remaining"]) == 20000 - 50
            assert r.headers["anthropic-ratelimit-requests-remaining"] == "1"
            r = await c.post("/v1/chat/completions", json={
                "model": "frontier", "messages": USER, "max_tokens": 5,
                "service_tier": "priority"})
            assert r.status_code == 200 and r.json()["service_tier"] == "priority"
            assert r.headers["x-ratelimit-remaining-requests"] == "0"
            r = await c.post("/v1/chat/completions", json={
                "model": "frontier", "messages": USER, "max_tokens": 5,
                "service_tier": "priority"})
            assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
            assert len(fake.bodies) == 2  # the refused one never reached the upstream


async def test_a_busy_remote_fast_pool_downgrades_to_the_in_process_standard_tier() -> None:
    fake = Fake()
    fake.mode = "503"
    async with serve(fake.app) as up:
        app = create_app(config({"fast": [up]}, fast_overflow="downgrade"))
        async with serve(app) as url, await client_for(url) as c:
            r = await c.post("/v1/chat/completions", json={
                "model": "frontier", "messages": USER, "max_tokens": 5,
                "service_tier": "priority"})
            assert r.status_code == 200, r.text
            assert r.json()["service_tier"] == "default"  # what served
            assert r.headers["x-fastmode-tier"] == "standard"
            assert r.headers["x-fastmode-requested-tier"] == "fast"
            assert "x-fastmode-upstream" not in r.headers  # served in process, billed there


async def test_a_context_over_the_window_is_refused_before_any_upstream() -> None:
    fake = Fake()
    async with serve(fake.app) as up:
        app = create_app(config({"fast": [up]}))
        async with serve(app) as url, await client_for(url) as c:
            r = await c.post("/v1/chat/completions", json={
                "model": "frontier", "messages": USER, "max_tokens": 10_000_000,
                "service_tier": "priority"})
            assert r.status_code == 400
            assert r.json()["error"]["code"] == "context_length_exceeded"
            assert fake.bodies == []
