"""The model endpoints' lane (``gateway.edge.lane``): past the framework, the same answers.

A POST to a model endpoint no longer goes through Starlette's and FastAPI's layers; what those
layers did for it must still happen: an error the endpoint does not catch is logged and
answered 500 in the route's own format, a body over the limit read while streaming in is a 413
in that format, and the app's middleware still wraps the request.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, default_config_text, load_config
from fastmode.gateway.pipeline import turn as turn_module

CHAT = {"model": "frontier", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "frontier", "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}]}


def small_body_config(tmp_path: Any) -> Config:
    path = tmp_path / "small.toml"
    path.write_text(default_config_text() + "\n[limits]\nmax_body_bytes = 2048\n")
    return load_config(path)


@pytest.fixture
async def client(tmp_path: Any) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    app = create_app(small_body_config(tmp_path))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
    try:
        yield app, c
    finally:
        await c.aclose()
        await ctx.__aexit__(None, None, None)


async def test_an_unexpected_error_is_logged_and_a_500_in_the_routes_format(
        client: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    app, c = client

    async def broken(self: Any, **_: Any) -> Any:
        raise RuntimeError("a bug in the turn")

    monkeypatch.setattr(turn_module.Turn, "start", broken)
    caplog.set_level(logging.ERROR, logger="fastmode.app")
    openai = await c.post("/v1/chat/completions", json=CHAT)
    anthropic = await c.post("/v1/messages", json=MESSAGES)
    assert openai.status_code == anthropic.status_code == 500
    assert openai.json()["error"]["code"] == "internal_error"  # OpenAI's error body
    assert anthropic.json()["type"] == "error"  # Anthropic's
    assert anthropic.json()["error"]["type"] == "api_error"
    assert sum("a bug in the turn" in str(r.exc_info) for r in caplog.records) == 2
    assert app.lane is not None and app.lane.takes(
        {"type": "http", "method": "POST", "path": "/v1/messages"})


async def test_a_body_over_the_limit_read_as_it_streams_in_is_a_413_in_the_routes_format(
        client: Any) -> None:
    _, c = client

    async def chunks() -> AsyncIterator[bytes]:  # no content-length: counted as it arrives
        for _ in range(8):
            yield b" " * 512

    r = await c.post("/v1/messages", content=chunks(),
                     headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "request_too_large"


async def test_other_requests_take_the_full_stack(client: Any) -> None:
    app, c = client
    wrong = await c.put("/v1/chat/completions")  # the lane takes POST only (GET: stored)
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert not app.lane.takes({"type": "http", "method": "PUT", "path": "/v1/chat/completions"})
    models = await c.get("/v1/models")
    assert models.status_code == 200
