"""A tier is a value: what a client sees depends on the role it asked for, never on what the
config calls the tier that serves it.

* Renaming every tier and deployment of the built-in config changes nothing on the wire for
  Chat, Responses (SSE and websocket) and Anthropic Messages, whichever role is asked for.
* A new service-tier word is one vocabulary row plus a route in the TOML: a made-up ``turbo``
  is routed, echoed, limited as a premium role and downgraded when its pool is full.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from conftest import quick_config_text

from fastmode.backends.mockmodel import GenerationRequest
from fastmode.gateway.app import create_app
from fastmode.gateway.config import load_config
from fastmode.gateway.protocols.vocabulary import ANTHROPIC_SPEEDS, OPENAI_SERVICE_TIERS
from fastmode.gateway.values.request import TurnRequest

USER = [{"role": "user", "content": "Name three rivers of France."}]
FAST_BETA = {"anthropic-beta": "fast-mode-2026-02-01", "anthropic-version": "2023-06-01"}
RENAMED = {"standard": "shared-pool", "fast": "express", "flex": "budget", "spark": "wafer"}


def renamed(text: str) -> str:
    """The config with every tier and every deployment renamed (a pure data change)."""
    names = "|".join(RENAMED)
    text = re.sub(rf"\[(tiers|deployments)\.({names})([\].])",
                  lambda m: f"[{m[1]}.{RENAMED[m[2]]}{m[3]}", text)
    # every value naming a tier (routes) or a deployment (tiers' deployment = ...)
    return re.sub(rf'^(\s*\w[\w-]*\s*=\s*)"({names})"', lambda m: f'{m[1]}"{RENAMED[m[2]]}"',
                  text, flags=re.M)


ID = re.compile(r"^(resp|msg|rs|fc|call|toolu|chatcmpl|req|cmpl|ws)[_-]")
VOLATILE = {"created", "created_at", "completed_at", "time_info", "system_fingerprint"}


def normal(obj: Any) -> Any:
    """The body with what differs between any two requests (ids, clocks) taken out."""
    if isinstance(obj, dict):
        return {k: normal(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [normal(v) for v in obj]
    if isinstance(obj, str) and ID.match(obj):
        return "<id>"
    return obj


def sse_events(text: str) -> list[Any]:
    return [normal(json.loads(line[6:])) for line in text.splitlines()
            if line.startswith("data: {")]


async def exchanges(base: str) -> dict[str, Any]:
    """The same requests, every protocol and role, as a client sees them."""
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        for model, tier in [("frontier", None), ("frontier", "priority"), ("frontier", "fast"),
                            ("frontier", "flex"), ("frontier-spark", "priority")]:
            body: dict[str, Any] = {"model": model, "messages": USER, "max_tokens": 12,
                                    "seed": 3}
            if tier:
                body["service_tier"] = tier
            r = await c.post("/v1/chat/completions", json=body)
            out[f"chat {model} {tier}"] = (r.status_code, normal(r.json()))
            r = await c.post("/v1/chat/completions", json={**body, "stream": True})
            out[f"chat-sse {model} {tier}"] = sse_events(r.text)
            rbody = {"model": model, "input": "Name three rivers of France.", "seed": 3,
                     "max_output_tokens": 12, **({"service_tier": tier} if tier else {})}
            r = await c.post("/v1/responses", json=rbody)
            out[f"responses {model} {tier}"] = (r.status_code, normal(r.json()))
            r = await c.post("/v1/responses", json={**rbody, "stream": True})
            out[f"responses-sse {model} {tier}"] = sse_events(r.text)
        r = await c.post("/fast/v1/chat/completions",
                         json={"model": "frontier", "messages": USER, "max_tokens": 12,
                               "seed": 3})
        out["chat /fast/v1"] = normal(r.json())
        for speed in (None, "standard", "fast"):
            mbody: dict[str, Any] = {"model": "frontier", "messages": USER, "max_tokens": 12,
                                     "seed": 3}
            if speed:
                mbody["speed"] = speed
            r = await c.post("/v1/messages", json=mbody, headers=FAST_BETA)
            out[f"messages {speed}"] = (r.status_code, normal(r.json()))
            r = await c.post("/v1/messages", json={**mbody, "stream": True}, headers=FAST_BETA)
            out[f"messages-sse {speed}"] = sse_events(r.text)
        models = (await c.get("/v1/models")).json()
        out["models"] = normal(models)
    ws_url = base.replace("http://", "ws://") + "/v1/responses"
    async with websockets.connect(ws_url, compression=None) as ws:
        for tier in (None, "priority", "flex"):
            await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                      "input": "Name three rivers of France.",
                                      "max_output_tokens": 12, "seed": 3,
                                      **({"service_tier": tier} if tier else {})}))
            events = []
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 30))
                events.append(normal(ev))
                if ev["type"] in ("response.completed", "response.incomplete",
                                  "response.failed", "error"):
                    break
            out[f"ws {tier}"] = events
    return out


async def test_renaming_every_tier_changes_nothing_on_the_wire(server_factory) -> None:
    text = quick_config_text()
    assert renamed(text) != text and '"express"' in renamed(text)
    assert "[tiers.fast" not in renamed(text)
    before = await exchanges(server_factory(config_text=text))
    after = await exchanges(server_factory(config_text=renamed(text)))
    assert before.keys() == after.keys()
    for key in before:
        assert after[key] == before[key], key
    # the roles were served as asked (the comparison above is not of two empty answers)
    assert before["chat frontier priority"][1]["service_tier"] == "priority"
    assert before["chat frontier flex"][1]["service_tier"] == "flex"
    assert before["chat frontier-spark priority"][1]["service_tier"] == "default"
    assert before["messages fast"][1]["usage"]["speed"] == "fast"
    assert before["ws priority"][-1]["response"]["service_tier"] == "priority"


async def test_the_tier_header_names_the_configured_tier(server_factory) -> None:
    """``x-fastmode-tier`` is fastmode's diagnostic of *which configured tier* served: the one
    place a tier's name is meant to show (docs/architecture.md)."""
    base = server_factory(config_text=renamed(quick_config_text()))
    r = httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "model": "frontier", "messages": USER, "max_tokens": 3, "service_tier": "fast"})
    assert r.headers["x-fastmode-tier"] == "express"
    assert r.json()["service_tier"] == "priority"


# -- a new service-tier word: one vocabulary row plus TOML --------------------------------------

TURBO = """
[deployments.turbo-pool]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
max_batch = 2
max_waiting = 0
[tiers.zoom]
deployment = "turbo-pool"
[[auth.keys]]
key = "k1"
[auth.keys.limits.zoom]
requests_per_minute = 100
input_tokens_per_minute = 100000
output_tokens_per_minute = 20000
"""


@pytest.fixture
async def turbo_app(tmp_path, monkeypatch) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    # the one vocabulary row per protocol: the word, the role it asks for, what is echoed
    monkeypatch.setitem(OPENAI_SERVICE_TIERS.asked, "turbo", "turbo")  # type: ignore[index]
    monkeypatch.setitem(OPENAI_SERVICE_TIERS.echo, "turbo", "turbo")  # type: ignore[index]
    monkeypatch.setitem(ANTHROPIC_SPEEDS.asked, "turbo", "turbo")  # type: ignore[index]
    monkeypatch.setitem(ANTHROPIC_SPEEDS.echo, "turbo", "turbo")  # type: ignore[index]
    # ... and the route: role -> tier, in the TOML
    text = quick_config_text().replace("[routes.frontier]\n",
                                       '[routes.frontier]\nturbo = "zoom"\n')
    text = text.replace('fast_overflow = "reject"', 'fast_overflow = "downgrade"')
    text = text.replace("[auth]\nenabled = false", "[auth]\nenabled = true")
    # a node for the new pool: one more in the first node group (the b200 nodes)
    text = re.sub(r"^count = (\d+) ", lambda m: f"count = {int(m[1]) + 1} ", text, count=1,
                  flags=re.M)
    path = tmp_path / "turbo.toml"
    path.write_text(text + TURBO)
    app = create_app(load_config(path))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                               timeout=60, headers={"authorization": "Bearer k1",
                                                    "x-api-key": "k1"})
    yield app, client
    await client.aclose()
    await ctx.__aexit__(None, None, None)


async def test_a_new_service_tier_word_is_a_row_and_a_route(turbo_app) -> None:
    app, client = turbo_app
    body = {"model": "frontier", "messages": USER, "max_tokens": 5, "service_tier": "turbo"}
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["service_tier"] == "turbo" and r.headers["x-fastmode-tier"] == "zoom"
    r = await client.post("/v1/responses", json={"model": "frontier", "input": "hi",
                                                  "max_output_tokens": 5,
                                                  "service_tier": "turbo"})
    assert r.status_code == 200 and r.json()["service_tier"] == "turbo"
    r = await client.post("/v1/messages", headers=FAST_BETA, json={
        "model": "frontier", "messages": USER, "max_tokens": 5, "speed": "turbo"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["speed"] == "turbo"
    # a premium role: the key's own fast-mode limits, in Anthropic's anthropic-fast-* headers
    assert r.headers["anthropic-fast-output-tokens-limit"] == "20000"
    # a model without a tier for the role refuses it (a premium role the model lacks)
    r = await client.post("/v1/chat/completions", json={**body, "model": "frontier-spark"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "service_tier"
    # a word nobody defined is a 400 naming the allowed words
    r = await client.post("/v1/chat/completions", json={**body, "service_tier": "warp"})
    assert r.status_code == 400 and "'turbo'" in r.json()["error"]["message"]


async def test_a_new_premium_role_downgrades_when_its_pool_is_full(turbo_app) -> None:
    app, client = turbo_app
    gw = app.state.gateway
    gen = GenerationRequest(messages=USER, ignore_eos=True)
    held = [await gw.admit(TurnRequest("frontier", "turbo", gen, 20, 3000, True,
                                       "Bearer k1")) for _ in range(2)]  # both seats
    assert {j.tier.name for j in held} == {"zoom"}
    r = await client.post("/v1/chat/completions", json={
        "model": "frontier", "messages": USER, "max_tokens": 5, "service_tier": "turbo"})
    assert r.status_code == 200
    assert r.json()["service_tier"] == "default"  # served standard: echoed as what served
    assert r.headers["x-fastmode-requested-tier"] == "zoom"
    for job in held:
        gw.settle(job, 499)
