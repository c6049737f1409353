"""Ground truth per request (gateway.observe.tracing): what ``GET /v1/fastmode/traces`` says.

In process, on the quick hardware: a traced request (``x-fastmode-trace: 1``, or every request
with ``server.trace_all``) leaves one JSONL record keyed by the server's ids and the client's
``x-request-id``, whose events add up to the tokens the body says were sent, on every protocol
and transport; each token event was handed to the transport no earlier than it was due on the
engine's modeled timeline; an untraced request leaves nothing; and a key sees only its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import quick_config_text
from starlette.testclient import TestClient

from fastmode.gateway.app import create_app
from fastmode.gateway.config import load_config

KEY_A = "sk-trace-a-6b1e0c7d9f2a48536b1e0c7d9f2a4853"
KEY_B = "sk-trace-b-2d9f4a7c1e3b56082d9f4a7c1e3b5608"
TRACED = {"x-fastmode-trace": "1"}


def _config(tmp: Path, extra: str = "", keys: bool = False) -> Any:
    text = quick_config_text()
    if keys:
        auth = text.index("[auth]\nenabled = false")
        end = text.index("\n", auth + len("[auth]\n"))
        text = (text[:auth] + f'[auth]\nenabled = true\n[[auth.keys]]\nkey = "{KEY_A}"\n'
                f'[[auth.keys]]\nkey = "{KEY_B}"\n' + text[end + 1:])
    if extra:
        text = text.replace("[server]\n", "[server]\n" + extra + "\n", 1)
    path = tmp / "c.toml"
    path.write_text(text)
    return load_config(path)


@pytest.fixture
async def client_for(tmp_path: Path) -> AsyncIterator[Any]:
    stack: list[Any] = []

    async def make(extra: str = "", keys: bool = False) -> httpx.AsyncClient:
        app = create_app(_config(tmp_path, extra, keys))
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                   timeout=30)
        stack.append((ctx, client))
        return client

    yield make
    for ctx, client in stack:
        await client.aclose()
        await ctx.__aexit__(None, None, None)


BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {
        "model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "max_tokens": 40, "stream_options": {"include_usage": True}}),
    "completions": ("/v1/completions", {"model": "gpt-5", "prompt": "hi", "stream": True,
                                        "max_tokens": 40,
                                        "stream_options": {"include_usage": True}}),
    "responses": ("/v1/responses", {"model": "gpt-5", "input": "hi", "stream": True,
                                    "max_output_tokens": 40}),
    "messages": ("/v1/messages", {"model": "claude-opus-4-6", "max_tokens": 40, "stream": True,
                                  "messages": [{"role": "user", "content": "hi"}]}),
}


def _sse_output_tokens(protocol: str, text: str) -> tuple[int, str]:
    """(output tokens the body's usage reports, the id the body carries)."""
    out, rid = -1, ""
    for line in text.splitlines():
        if not line.startswith("data: {"):
            continue
        ev = orjson.loads(line[6:])
        if protocol in ("chat", "completions"):
            rid = ev.get("id", rid)
            if ev.get("usage"):
                out = ev["usage"]["completion_tokens"]
        elif protocol == "responses":
            # the reply may run into max_output_tokens: then it ends "incomplete"
            if ev.get("type") in ("response.completed", "response.incomplete"):
                rid, out = ev["response"]["id"], ev["response"]["usage"]["output_tokens"]
        elif ev.get("type") == "message_start":
            rid = ev["message"]["id"]
        elif ev.get("type") == "message_delta":
            out = ev["usage"]["output_tokens"]
    return out, rid


async def _traces(client: httpx.AsyncClient, since: int = 0,
                  headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/fastmode/traces?since={since}", headers=headers or {})
    assert r.status_code == 200, r.text
    return [orjson.loads(line) for line in r.text.splitlines()]


def _check_timeline(rec: dict[str, Any], out: int) -> None:
    events = rec["events"]
    assert rec["output_tokens"] == out == sum(e["tokens"] for e in events)
    assert rec["arrival"] <= rec["first_byte"] <= rec["first_token"] <= rec["last_byte"]
    assert rec["first_byte"] == events[0]["sent"] and rec["last_byte"] == events[-1]["sent"]
    sent = [e["sent"] for e in events]
    assert sent == sorted(sent)
    for e in events:
        assert (e["due"] is None) == (e["tokens"] == 0)
        if e["tokens"]:  # an event never leaves before the engine made its last token
            assert e["sent"] >= e["due"] - 1e-6, e


@pytest.mark.parametrize("protocol", sorted(BODIES))
async def test_a_traced_stream_is_recorded_event_by_event(client_for: Any, protocol: str) -> None:
    client = await client_for()
    path, body = BODIES[protocol]
    r = await client.post(path, json=body, headers={**TRACED, "x-request-id": f"tool-{protocol}"})
    assert r.status_code == 200, r.text
    out, rid = _sse_output_tokens(protocol, r.text)
    assert out > 0
    [rec] = await _traces(client)
    assert rec["client_request_id"] == f"tool-{protocol}"
    assert rec["response_id"] == rid
    assert rec["request_id"] == r.headers["x-request-id"]
    assert (rec["protocol"], rec["transport"], rec["status"]) == (protocol, "http", 200)
    _check_timeline(rec, out)
    # Chat's role chunk is an event without tokens, sent with the first token's: TTFT is the
    # first event that carries tokens
    first = rec["events"][0]
    assert first["tokens"] == 0


async def test_untraced_requests_leave_nothing(client_for: Any) -> None:
    client = await client_for()
    path, body = BODIES["chat"]
    assert (await client.post(path, json=body)).status_code == 200
    assert await _traces(client) == []


async def test_trace_all_and_since(client_for: Any) -> None:
    client = await client_for("trace_all = true")
    path, body = BODIES["completions"]
    for k in range(3):
        r = await client.post(path, json=body, headers={"x-client-request-id": f"c{k}"})
        assert r.status_code == 200
    recs = await _traces(client)
    assert [r["client_request_id"] for r in recs] == ["c0", "c1", "c2"]
    later = await _traces(client, since=recs[0]["seq"])
    assert [r["client_request_id"] for r in later] == ["c1", "c2"]
    bad = await client.get("/v1/fastmode/traces?since=x")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"


async def test_a_whole_answer_is_one_write(client_for: Any) -> None:
    client = await client_for("trace_all = true")
    path, body = BODIES["chat"]
    plain = {k: v for k, v in body.items() if k != "stream_options"}
    r = await client.post(path, json={**plain, "stream": False})
    assert r.status_code == 200
    [rec] = await _traces(client)
    assert [e["tokens"] for e in rec["events"]] == [r.json()["usage"]["completion_tokens"]]


async def test_a_key_sees_only_its_own_traces(client_for: Any) -> None:
    client = await client_for("trace_all = true", keys=True)
    path, body = BODIES["chat"]
    for key in (KEY_A, KEY_B):
        r = await client.post(path, json=body, headers={"authorization": f"Bearer {key}",
                                                        "x-request-id": key[:10]})
        assert r.status_code == 200
    a = await _traces(client, headers={"authorization": f"Bearer {KEY_A}"})
    b = await _traces(client, headers={"authorization": f"Bearer {KEY_B}"})
    assert [r["client_request_id"] for r in a] == [KEY_A[:10]]
    assert [r["client_request_id"] for r in b] == [KEY_B[:10]]
    assert (await client.get("/v1/fastmode/traces")).status_code == 401


def test_the_websocket_is_traced(tmp_path: Path) -> None:
    app = create_app(_config(tmp_path, "trace_all = true"))
    with TestClient(app) as client:
        with client.websocket_connect("/v1/responses",
                                      headers={"x-request-id": "ws-1"}) as ws:
            ws.send_text(orjson.dumps({"type": "response.create", "model": "gpt-5",
                                       "input": "hi", "max_output_tokens": 30}).decode())
            while True:  # a reply that reasoned past 30 tokens ends incomplete: also an end
                ev = orjson.loads(ws.receive_text())
                assert ev["type"] not in ("error", "response.failed"), ev
                if ev["type"] in ("response.completed", "response.incomplete"):
                    break
        recs = [orjson.loads(x) for x in client.get("/v1/fastmode/traces").text.splitlines()]
    [rec] = recs
    assert rec["transport"] == "websocket" and rec["client_request_id"] == "ws-1"
    assert rec["response_id"] == ev["response"]["id"]
    _check_timeline(rec, ev["response"]["usage"]["output_tokens"])
