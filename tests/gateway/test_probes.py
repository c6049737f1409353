"""vLLM's probe surface: what load generators and orchestrators call before they
send a request. guidellm's OpenAI backend validates its target with ``GET {target}/health``
(the base URL without ``/v1``, with its bearer header) and stops on anything but a 2xx;
SageMaker probes ``/ping``; ``/version`` and ``/load`` are vLLM's too. Each answers as vLLM
does, without an API key even when auth is on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from fastmode.gateway.app import create_app
from fastmode.gateway.config import default_config_text, load_config

AUTH_ON = default_config_text().replace(
    "enabled = false", 'enabled = true\n[[auth.keys]]\nkey = "sk-probe"\n', 1)


@pytest.fixture
async def client(tmp_path) -> AsyncIterator[httpx.AsyncClient]:
    cfg = tmp_path / "c.toml"
    cfg.write_text(AUTH_ON)
    config = load_config(cfg)
    config = config.model_copy(update={"state": config.state.model_copy(
        update={"path": str(tmp_path / "l.db")})})
    app = create_app(config)
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
    c.app = app  # type: ignore[attr-defined]
    yield c
    await c.aclose()
    await ctx.__aexit__(None, None, None)


async def test_health_answers_as_vllm_does_and_guidellm_validates(client) -> None:
    # guidellm: GET {target}/health with its headers, then raise_for_status()
    r = await client.get("/health", headers={"authorization": "Bearer sk-probe"})
    r.raise_for_status()
    assert r.status_code == 200 and r.content == b""
    assert (await client.get("/health")).status_code == 200  # no key needed, as in vLLM
    for method in ("GET", "POST"):
        ping = await client.request(method, "/ping")
        assert (ping.status_code, ping.content) == (200, b"")
    # a turn still needs its key: the probes opened nothing else
    turn = await client.post("/v1/chat/completions", json={
        "model": "frontier", "messages": [{"role": "user", "content": "hi"}]})
    assert turn.status_code == 401


async def test_version_and_load(client) -> None:
    v = (await client.get("/version")).json()
    assert set(v) == {"version"} and v["version"][0].isdigit()
    assert (await client.get("/load")).json() == {"server_load": 0}


async def test_health_is_503_once_a_graceful_shutdown_began(client) -> None:
    client.app.state.gateway.draining = True
    try:
        assert (await client.get("/health")).status_code == 503
        assert (await client.post("/ping")).status_code == 503
    finally:
        client.app.state.gateway.draining = False
