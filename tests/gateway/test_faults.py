"""Faults on demand (gateway.faults): the header, config rules, the admin API; every protocol,
both transports; the official SDKs' retries against them; metrics and ledger rows."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator

import anthropic
import httpx
import httpx2
import openai
import orjson
import pytest
import websockets
from test_openai_sdk import USER, metric

from fastmode.gateway.app import create_app
from fastmode.gateway.config import default_config_text, load_config

ADMIN_KEY = "admin-secret"
FAULTS = f"""
[admin]
enabled = true
key = "{ADMIN_KEY}"
"""
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
CHAT = {"model": "frontier", "messages": USER, "max_tokens": 12, "stream": True,
        "ignore_eos": True}


def config_with(extra: str, tmp_path, replace: tuple[str, str] | None = None):
    text = default_config_text()
    if replace is not None:
        assert replace[0] in text
        text = text.replace(*replace)
    path = tmp_path / f"faults-{len(list(tmp_path.iterdir()))}.toml"
    path.write_text(text + extra)
    return load_config(path)


@pytest.fixture
async def app_for(tmp_path) -> AsyncIterator:
    """``make(extra_toml)`` -> (app, transport) with the app's lifespan running."""
    stack = []

    async def make(extra: str = "", replace: tuple[str, str] | None = None):
        app = create_app(config_with(extra, tmp_path, replace))
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        stack.append(ctx)
        return app, httpx.ASGITransport(app=app)

    yield make
    for ctx in reversed(stack):
        await ctx.__aexit__(None, None, None)


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory) -> AsyncIterator[str]:
    from conftest import start_server, stop_server

    tmp = tmp_path_factory.mktemp("faults")
    proc, url = start_server(config_text=default_config_text() + FAULTS, tmp=tmp)
    yield url
    stop_server(proc)


def seed_for(pattern: list[bool], p: float) -> int:
    """A seed whose first draws hit (True) or miss (False) a rule of probability ``p``."""
    for seed in range(10_000):
        rng = random.Random(seed)
        if [rng.random() < p for _ in pattern] == pattern:
            return seed
    raise AssertionError("no seed")


def injected(app, kind: str) -> float:
    total = 0.0
    for m in app.state.gateway.metrics.registry.collect():
        for s in m.samples:
            if s.name == "fastmode_faults_injected_total" and s.labels["kind"] == kind:
                total += s.value
    return total


# -- the header -------------------------------------------------------------------------------

@pytest.mark.parametrize("header", ["nope", "429;p=2", "cut;after=-1", "stall;s=x", "500;q=1",
                                    "stall;s=1;s=2"])
async def test_a_malformed_fault_header_is_a_400_naming_it(app_for, header) -> None:
    _, transport = await app_for()
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.post("/v1/chat/completions", json=CHAT, headers={"x-fastmode-fault": header})
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "x-fastmode-fault"
        r = await c.post("/v1/messages", json={**CHAT, "stream": False},
                         headers={"x-fastmode-fault": header})
        assert r.status_code == 400 and r.json()["type"] == "error"


# -- the SDKs' retries ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["429", "500", "503"])
async def test_openai_sdk_retries_recover_from_injected_faults(app_for, kind) -> None:
    """A configured rule (p = 0.5, seeded) fails the first two attempts; the SDK's default
    budget of two retries gets the answer."""
    seed = seed_for([True, True, False], 0.5)
    app, transport = await app_for(f"""
[faults]
seed = {seed}
[[faults.rules]]
kind = "{kind}"
p = 0.5
s = 0.01
""")
    sdk = openai.AsyncOpenAI(base_url="http://t/v1", api_key="x", max_retries=2,
                             http_client=httpx.AsyncClient(transport=transport))
    out = await sdk.chat.completions.create(model="frontier", messages=USER, max_tokens=5)
    assert out.choices[0].message.content
    assert injected(app, kind) == 2


@pytest.mark.parametrize("kind,error", [
    ("429", openai.RateLimitError), ("500", openai.InternalServerError),
    ("503", openai.InternalServerError)])
async def test_openai_sdk_raises_the_right_class_when_retries_run_out(app_for, kind,
                                                                      error) -> None:
    app, transport = await app_for()
    sdk = openai.AsyncOpenAI(base_url="http://t/v1", api_key="x", max_retries=1,
                             http_client=httpx.AsyncClient(transport=transport))
    with pytest.raises(error) as caught:
        await sdk.chat.completions.create(
            model="frontier", messages=USER, max_tokens=5,
            extra_headers={"x-fastmode-fault": f"{kind};s=0.01"})
    assert caught.value.status_code == int(kind)
    assert injected(app, kind) == 2  # the first attempt and one retry


@pytest.mark.parametrize("kind,error", [
    ("529", anthropic.OverloadedError), ("429", anthropic.RateLimitError),
    ("500", anthropic.InternalServerError), ("503", anthropic.ServiceUnavailableError)])
async def test_anthropic_sdk_against_injected_faults(app_for, kind, error) -> None:
    seed = seed_for([True, False], 0.5)
    app, transport = await app_for(f"""
[faults]
seed = {seed}
[[faults.rules]]
kind = "{kind}"
p = 0.5
s = 0.01
""")
    sdk = anthropic.AsyncAnthropic(  # this SDK rides on httpx2
        base_url="http://t", api_key="x", max_retries=2,
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)))
    msg = await sdk.messages.create(model="frontier", max_tokens=5, messages=USER)
    assert msg.content and injected(app, kind) == 1
    with pytest.raises(error) as caught:
        await sdk.with_options(max_retries=0).messages.create(
            model="frontier", max_tokens=5, messages=USER,
            extra_headers={"x-fastmode-fault": f"{kind};s=0.01"})
    assert caught.value.status_code == int(kind)
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    if kind == "529":
        assert body["error"]["type"] == "overloaded_error"


async def test_an_injected_429_carries_retry_after_and_rate_limit_headers(app_for) -> None:
    _, transport = await app_for()
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.post("/v1/chat/completions", json=CHAT,
                         headers={"x-fastmode-fault": "429;s=2.5"})
    assert r.status_code == 429
    # whole seconds rounded up (2.5 s is 3 s, never 2: a client must not retry early)
    assert r.headers["retry-after-ms"] == "2500" and r.headers["retry-after"] == "3"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"


async def test_fast_exhausted_rejects_or_downgrades(app_for) -> None:
    body = {**CHAT, "stream": False}
    fault = {"x-fastmode-fault": "fast-exhausted"}
    app, transport = await app_for()
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.post("/fast/v1/chat/completions", json=body, headers=fault)
        assert r.status_code == 429 and "capacity" in r.json()["error"]["message"]
        r = await c.post("/v1/chat/completions", json=body, headers=fault)
        assert r.status_code == 200  # not on the fast pool: nothing to exhaust
    assert injected(app, "fast-exhausted") == 1
    _, transport = await app_for(replace=('fast_overflow = "reject"',
                                          'fast_overflow = "downgrade"'))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.post("/fast/v1/chat/completions", json=body, headers=fault)
    assert r.status_code == 200
    assert r.headers["x-fastmode-tier"] == "standard"
    assert r.headers["x-fastmode-requested-tier"] == "fast"


# -- mid-stream faults, on a real server (raw httpx sees what the wire carries) ---------------

def sse_events(lines: list[str]) -> list[str]:
    return [line[6:] for line in lines if line.startswith("data: ")]


def stream_lines(url: str, path: str, body: dict, fault: str, **kw) -> tuple[list[str], Exception | None]:
    lines: list[str] = []
    try:
        with httpx.stream("POST", url + path, json=body, headers={"x-fastmode-fault": fault},
                          timeout=kw.get("timeout", 30)) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                lines.append(line)
    except httpx.HTTPError as exc:
        return lines, exc
    return lines, None


def test_cut_drops_the_connection_after_n_tokens(fault_server) -> None:
    lines, error = stream_lines(fault_server, "/v1/chat/completions", CHAT, "cut;after=5")
    assert isinstance(error, httpx.RemoteProtocolError)  # an incomplete chunked body
    events = sse_events(lines)
    assert "[DONE]" not in events
    deltas = [e for e in events if '"content":"' in e and '"role"' not in e]
    assert len(deltas) == 5
    rows = ledger(fault_server)
    assert any(r["fault"] == "cut" and r["ended"] == "cut" for r in rows)


def test_malformed_breaks_one_event_and_the_stream_goes_on(fault_server) -> None:
    lines, error = stream_lines(fault_server, "/v1/chat/completions", CHAT, "malformed;after=3")
    assert error is None
    events = sse_events(lines)
    broken = []
    for e in events[:-1]:
        try:
            orjson.loads(e)
        except orjson.JSONDecodeError:
            broken.append(e)
    assert len(broken) == 1 and events[-1] == "[DONE]"
    with pytest.raises(Exception):  # noqa: B017 - the SDK's parser fails on it, as intended
        sdk = openai.OpenAI(base_url=fault_server + "/v1", api_key="x", max_retries=0)
        for _ in sdk.chat.completions.create(
                model="frontier", messages=USER, max_tokens=8, stream=True,
                extra_headers={"x-fastmode-fault": "malformed;after=2"}):
            pass


def test_error_event_in_every_protocols_format(fault_server) -> None:
    lines, _ = stream_lines(fault_server, "/v1/chat/completions", CHAT, "error-event;after=2")
    last = orjson.loads(sse_events(lines)[-1])
    assert last["error"]["code"] == "injected_fault"
    sdk = openai.OpenAI(base_url=fault_server + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.APIError):
        for _ in sdk.chat.completions.create(
                model="frontier", messages=USER, max_tokens=8, stream=True,
                extra_headers={"x-fastmode-fault": "error-event;after=2"}):
            pass
    lines, _ = stream_lines(fault_server, "/v1/responses",
                            {"model": "frontier", "input": "hi", "max_output_tokens": 8,
                             "stream": True}, "error-event;after=2")
    assert lines[-3] == "event: response.failed"
    lines, _ = stream_lines(fault_server, "/v1/messages", {**CHAT, "max_tokens": 8},
                            "error-event;after=2")
    assert "event: error" in lines
    ant = anthropic.Anthropic(base_url=fault_server, api_key="x", max_retries=0)
    with pytest.raises(anthropic.APIError):
        with ant.messages.stream(model="frontier", max_tokens=8, messages=USER,
                                 extra_headers={"x-fastmode-fault": "error-event;after=1"}) as s:
            for _ in s:
                pass


def test_stall_trips_a_client_read_timeout_mid_stream(fault_server) -> None:
    lines, error = stream_lines(fault_server, "/v1/chat/completions", CHAT,
                                "stall;after=2;s=5", timeout=httpx.Timeout(30, read=0.5))
    assert isinstance(error, httpx.ReadTimeout)
    deltas = [e for e in sse_events(lines) if '"content":"' in e and '"role"' not in e]
    assert len(deltas) == 2


def test_timeout_stalls_before_the_response_and_holds_no_slot(fault_server) -> None:
    before = metric(fault_server, "fastmode_faults_injected_total", kind="timeout")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(fault_server + "/v1/chat/completions", json=CHAT,
                   headers={"x-fastmode-fault": "timeout;s=5"}, timeout=httpx.Timeout(5, read=0.3))
    assert metric(fault_server, "fastmode_faults_injected_total", kind="timeout") == before + 1
    assert metric(fault_server, "fastmode_replica_running", deployment="standard") == 0
    sdk = openai.OpenAI(base_url=fault_server + "/v1", api_key="x", max_retries=0, timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        sdk.chat.completions.create(model="frontier", messages=USER, max_tokens=5,
                                    extra_headers={"x-fastmode-fault": "timeout;s=5"})


def ledger(url: str) -> list[dict]:
    r = httpx.get(url + "/admin/ledger", headers=ADMIN)
    assert r.status_code == 200
    return r.json()["data"]


# -- the websocket ----------------------------------------------------------------------------

async def ws_turn(url: str, fault: str) -> tuple[list[dict], int | None]:
    return await asyncio.wait_for(_ws_turn(url, fault), 20)


async def _ws_turn(url: str, fault: str) -> tuple[list[dict], int | None]:
    events: list[dict] = []
    ws_url = url.replace("http://", "ws://") + "/v1/responses"
    async with websockets.connect(ws_url, additional_headers={"x-fastmode-fault": fault}) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                  "input": "hi", "max_output_tokens": 8}))
        try:
            while True:
                event = json.loads(await ws.recv())
                events.append(event)
                if event["type"] in ("error", "response.completed", "response.failed"):
                    return events, None
        except websockets.ConnectionClosed as exc:
            return events, exc.rcvd.code if exc.rcvd else None


@pytest.mark.parametrize("kind,status", [("429", 429), ("500", 500), ("503", 503),
                                         ("529", 529)])
async def test_websocket_status_faults_are_error_events(fault_server, kind, status) -> None:
    events, closed = await ws_turn(fault_server, kind)
    assert closed is None and events[-1]["type"] == "error"
    assert events[-1]["status"] == status


async def test_websocket_cut_and_error_event(fault_server) -> None:
    events, closed = await ws_turn(fault_server, "cut;after=3")
    assert closed == 1011
    assert sum(e["type"] == "response.output_text.delta" for e in events) == 3
    assert events[-1]["type"] not in ("response.completed", "response.failed")
    events, closed = await ws_turn(fault_server, "error-event;after=3")
    assert closed is None and events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "injected_fault"


# -- the admin API ----------------------------------------------------------------------------

def test_admin_rules_are_scoped_to_a_test_id(fault_server) -> None:
    url = fault_server + "/admin/faults"
    assert httpx.post(url, json={"kind": "500"}).status_code == 401
    assert httpx.post(url, json={"kind": "500"},
                      headers={"authorization": "Bearer nope"}).status_code == 401
    r = httpx.post(url, json={"kind": "nope"}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"]["param"] == "kind"
    r = httpx.post(url, json={"kind": "503", "test_id": "suite-a", "name": "a503"},
                   headers=ADMIN)
    assert r.status_code == 201 and r.json()["name"] == "a503"
    body = {**CHAT, "stream": False}
    chat = fault_server + "/v1/chat/completions"
    a = httpx.post(chat, json=body, headers={"x-fastmode-test-id": "suite-a"})
    b = httpx.post(chat, json=body, headers={"x-fastmode-test-id": "suite-b"})
    plain = httpx.post(chat, json=body)
    assert (a.status_code, b.status_code, plain.status_code) == (503, 200, 200)
    listed = httpx.get(url, headers=ADMIN, params={"test_id": "suite-a"}).json()["data"]
    assert [(r["name"], r["kind"], r["test_id"]) for r in listed] == [("a503", "503", "suite-a")]
    assert httpx.delete(url + "/a503", headers=ADMIN).json() == {"deleted": 1}
    assert httpx.delete(url + "/a503", headers=ADMIN).status_code == 404
    a = httpx.post(chat, json=body, headers={"x-fastmode-test-id": "suite-a"})
    assert a.status_code == 200
    rows = [r for r in ledger(fault_server) if r["fault"] == "503"]
    assert rows and rows[-1]["ended"] == "rejected" and rows[-1]["tier_served"] is None


async def test_admin_api_is_off_unless_enabled(app_for) -> None:
    _, transport = await app_for()
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.get("/admin/faults", headers=ADMIN)
    assert r.status_code == 404


async def test_a_stall_longer_than_the_lag_bound_is_not_a_lagging_reader(app_for) -> None:
    """The server's own injected pause must not count against the reader."""
    app, transport = await app_for(replace=("stream_max_lag_s = 30", "stream_max_lag_s = 0.3"))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 150},
                         headers={"x-fastmode-fault": "stall;after=2;s=1"})  # still generating
    events = [line[6:] for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert "stream_reader_too_slow" not in r.text
