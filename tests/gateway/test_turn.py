"""The shared turn pipeline, in process (httpx.ASGITransport / Starlette's TestClient): the same
headers, settlement and error formats for every protocol."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anthropic
import httpx
import orjson
import pytest
from starlette.testclient import TestClient
from test_openai_sdk import small

from fastmode.backends.mockmodel import GenerationRequest
from fastmode.gateway import protocols
from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, load_config
from fastmode.gateway.values.request import TurnRequest

USER = [{"role": "user", "content": "What is the weather in Lyon?"}]


def config_from(text: str, tmp_path) -> Config:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_config(path)


@pytest.fixture
async def app_client(tmp_path) -> AsyncIterator:
    """``make(config)`` -> (app, httpx client) with the app's lifespan running."""
    stack = []

    async def make(config: Config | None = None):
        app = create_app(config)
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        stack.append((ctx, client))
        return app, client

    yield make
    for ctx, client in reversed(stack):
        await client.aclose()
        await ctx.__aexit__(None, None, None)


async def hold_fast_slot(app):
    """Admit a long request on the fast tier and never read it: its batch slot stays taken."""
    gen = GenerationRequest(messages=USER, ignore_eos=True)
    return await app.state.gateway.admit(TurnRequest("frontier", "fast", gen, 20, 3000, True))


async def test_downgrade_header_on_every_protocol(app_client, tmp_path) -> None:
    app, client = await app_client(config_from(small("downgrade"), tmp_path))
    held = await hold_fast_slot(app)
    bodies = {
        "/fast/v1/chat/completions": {"model": "frontier", "messages": USER, "max_tokens": 3},
        "/fast/v1/responses": {"model": "frontier", "input": "hi", "max_output_tokens": 3},
        "/fast/v1/messages": {"model": "frontier", "messages": USER, "max_tokens": 3},
    }
    for path, body in bodies.items():
        r = await client.post(path, json=body)
        assert r.status_code == 200, (path, r.text)
        assert r.headers["x-fastmode-tier"] == "standard", path
        assert r.headers["x-fastmode-requested-tier"] == "fast", path
    app.state.gateway.settle(held, 499)


def test_anthropic_stream_final_cost_is_the_whole_reply(quick_server: str) -> None:
    sdk = anthropic.Anthropic(base_url=quick_server, api_key="x")  # the same prices, faster
    with sdk.messages.stream(model="frontier", max_tokens=120, messages=USER) as stream:
        final = stream.get_final_message()
    usage = final.usage
    expected = (usage.input_tokens * 5.0 + usage.output_tokens * 25.0) / 1e6
    assert usage.output_tokens > 1
    assert usage.model_extra["cost_usd"] == pytest.approx(expected)


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/v1/messages", 405),
    ("POST", "/v1/messages/nope", 404),
    ("POST", "/fast/v1/messages/nope", 404),
])
async def test_anthropic_paths_answer_in_anthropic_format(app_client, method, path, status):
    _, client = await app_client()
    r = await client.request(method, path, json={})
    assert r.status_code == status
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] in (
        "not_found_error", "invalid_request_error")
    assert "request-id" in r.headers


async def test_openai_paths_answer_in_openai_format(app_client) -> None:
    _, client = await app_client()
    r = await client.put("/v1/chat/completions")  # GET lists stored completions; PUT is none
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"


class Boom(RuntimeError):
    pass


def _exploding(monkeypatch, protocol) -> None:
    """Make ``protocol``'s encoder raise on the first token batch (a bug in an encoder)."""
    real = type(protocol).encoder

    def encoder(self, job, req, turn):
        enc = real(self, job, req, turn)

        def tokens(start, count):
            raise Boom("encoder bug")

        enc.tokens = tokens
        enc.sse_tokens = tokens
        return enc

    monkeypatch.setattr(type(protocol), "encoder", encoder)


async def test_a_failure_mid_stream_is_an_error_event_and_is_settled(
        app_client, monkeypatch, caplog) -> None:
    app, client = await app_client()
    _exploding(monkeypatch, protocols.ENDPOINTS["/chat/completions"])
    with caplog.at_level(logging.ERROR, logger="fastmode.turn"):
        r = await client.post("/v1/chat/completions", json={
            "model": "frontier", "messages": USER, "max_tokens": 5, "stream": True})
    events = [line[6:] for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert orjson.loads(events[-1])["error"]["code"] == "internal_error"
    assert any("failed while streaming" in rec.message for rec in caplog.records)
    assert app.state.gateway.engine.jobs == set()  # settled, slot freed


def test_a_failure_inside_a_websocket_turn_is_an_error_event(monkeypatch, caplog) -> None:
    _exploding(monkeypatch, protocols.ENDPOINTS["/responses"])
    app = create_app()
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses") as ws:
        with caplog.at_level(logging.ERROR):
            ws.send_text(orjson.dumps({"type": "response.create", "model": "frontier",
                                       "input": "hi", "max_output_tokens": 5}).decode())
            seen = []
            while True:
                event = orjson.loads(ws.receive_text())
                seen.append(event["type"])
                if event["type"] in ("response.failed", "error", "response.completed"):
                    break
        assert seen[-1] == "response.failed"
        assert event["response"]["error"]["code"] == "internal_error"
        # the socket stays usable: a bad frame still gets its error event
        ws.send_text("{")
        assert orjson.loads(ws.receive_text())["type"] == "error"
    assert app.state.gateway.engine.jobs == set()
