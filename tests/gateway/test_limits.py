"""Bounds on hostile input (gateway.limits): a clear 4xx in the route's own format, before the
work, on every protocol and on the websocket — never a 500, a hang or a frozen loop."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import httpx
import orjson
import pytest
from starlette.testclient import TestClient
from test_openai_sdk import USER

from fastmode.gateway.app import create_app
from fastmode.gateway.config import default_config_text

LIMITS = """
[limits]
max_body_bytes = 65536
max_header_bytes = 8192
"""


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app()
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as c:
        yield c
    await ctx.__aexit__(None, None, None)


def chat_tool(schema) -> dict:
    return {"model": "frontier", "messages": USER, "max_tokens": 5,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]}


HOSTILE_SCHEMAS = [
    ({"type": "object", "properties": {"x": {"type": "array", "minItems": 2_000_000}}},
     "tools[0].function.parameters.properties.x.minItems"),
    ({"type": "object", "properties": [{"x": 1}]}, "tools[0].function.parameters.properties"),
    ({"type": "object", "properties": {"x": {"type": "array", "minItems": "x"}}},
     "tools[0].function.parameters.properties.x.minItems"),
    ({"type": "object", "properties": {"x": {"type": "string", "minLength": 10**9}}},
     "tools[0].function.parameters.properties.x.minLength"),
    ({"type": "object", "properties": {"x": {"enum": list(range(5000))}}},
     "tools[0].function.parameters.properties.x.enum"),
    # a required recursion: the generator would never stop
    ({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
     "tools[0].function.parameters"),
    # nested arrays whose worst case multiplies out to a billion values
    ({"type": "object", "required": ["m"], "properties": {"m": {
        "type": "array", "maxItems": 1000, "items": {
            "type": "array", "maxItems": 1000, "items": {
                "type": "array", "maxItems": 1000, "items": {"type": "integer"}}}}}},
     "tools[0].function.parameters"),
    ({"type": "object", "properties": {"x": {"type": "array", "minItems": 1e300}}},
     "tools[0].function.parameters.properties.x.minItems"),
]


@pytest.mark.parametrize("schema,param", HOSTILE_SCHEMAS)
async def test_hostile_tool_schemas_are_400s_naming_the_field(client, schema, param) -> None:
    r = await client.post("/v1/chat/completions", json=chat_tool(schema))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"].startswith(param), err
    assert err["code"] == "invalid_tool_schema"


async def test_the_same_schema_bounds_on_responses_and_messages(client) -> None:
    schema = HOSTILE_SCHEMAS[0][0]
    r = await client.post("/v1/responses", json={
        "model": "frontier", "input": "hi",
        "tools": [{"type": "function", "name": "f", "parameters": schema}]})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "tools[0].parameters.properties.x.minItems"
    r = await client.post("/v1/messages", json={
        "model": "frontier", "max_tokens": 5, "messages": USER,
        "tools": [{"name": "f", "input_schema": {"type": "object", "properties": [1]}}]})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "tools[0].input_schema.properties" in body["error"]["message"]


async def test_a_legit_recursive_schema_still_works(client) -> None:
    tree = {"type": "object", "properties": {"name": {"type": "string"},
                                             "children": {"type": "array",
                                                          "items": {"$ref": "#"}}},
            "required": ["name"]}
    # a whole tree: the generator's depth bound keeps it under ~350 tokens (2,000 seeds); a
    # cap of 200 cut ~2% of unseeded replies mid-JSON (a flaky failure), so the cap is 1,000
    # and the reply seeded
    r = await client.post("/v1/chat/completions",
                          json={**chat_tool(tree), "max_tokens": 1000, "seed": 7})
    assert r.status_code == 200, r.text
    call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert "name" in orjson.loads(call["function"]["arguments"])


def deep_json(n: int) -> str:
    """A JSON object nested ``n`` deep, as text (the encoders of Python refuse to write it)."""
    return '{"a":' * n + "1" + "}" * n


async def test_deep_nesting_is_a_400_not_a_recursion_error(client) -> None:
    content = '[{"type": "text", "text": "hi", "meta": ' + deep_json(1000) + "}]"
    for path in ("/v1/chat/completions", "/v1/messages"):
        raw = ('{"model": "frontier", "max_tokens": 5, "messages": [{"role": "user", '
               '"content": ' + content + "}]}")
        r = await client.post(path, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400, r.text
        if path == "/v1/messages":
            assert r.json()["type"] == "error"
        else:
            assert r.json()["error"]["code"] == "nesting_too_deep"


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"messages": USER * 3000}, "messages"),
    ("/v1/responses", {"input": [{"role": "user", "content": "x"}] * 3000}, "input"),
    ("/v1/chat/completions", {"messages": USER, "tools": [
        {"type": "function", "function": {"name": f"f{i}"}} for i in range(200)]}, "tools"),
    ("/v1/messages", {"messages": USER, "max_tokens": 5,
                      "stop_sequences": [str(i) for i in range(40)]}, "stop_sequences"),
    ("/v1/messages", {"messages": USER, "max_tokens": 5,
                      "stop_sequences": ["x" * 5000]}, "stop_sequences[0]"),
])
async def test_counts_are_bounded(client, path, body, param) -> None:
    r = await client.post(path, json={"model": "frontier", **body})
    assert r.status_code == 400, r.text
    if path.endswith("messages"):
        assert param in r.json()["error"]["message"]
    else:
        assert r.json()["error"]["param"] == param


def test_websocket_answers_hostile_frames_with_error_events() -> None:
    app = create_app()
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses") as ws:
        for tools in ([{"type": "function", "name": "f", "parameters": HOSTILE_SCHEMAS[1][0]}],
                      [{"type": "function", "name": "f", "parameters": HOSTILE_SCHEMAS[2][0]}]):
            ws.send_text(orjson.dumps({"type": "response.create", "model": "frontier",
                                       "input": "hi", "tools": tools}).decode())
            event = orjson.loads(ws.receive_text())
            assert event["type"] == "error" and event["status"] == 400
            assert event["error"]["code"] == "invalid_tool_schema"
        ws.send_text('{"type": "response.create", "model": "frontier", "input": [{"role": '
                     '"user", "content": [' + deep_json(500) + "]}]}")
        event = orjson.loads(ws.receive_text())
        assert event["type"] == "error" and event["error"]["code"] == "nesting_too_deep"


# -- body and header size, on a real server -------------------------------------------------

@pytest.fixture(scope="module")
def small_limits(tmp_path_factory) -> AsyncIterator[str]:
    from conftest import start_server, stop_server

    proc, url = start_server(config_text=default_config_text() + LIMITS,
                             tmp=tmp_path_factory.mktemp("limits"))
    yield url
    stop_server(proc)


def raw_request(url: str, head: bytes, body: bytes = b"") -> bytes:
    """Send bytes as they are (no client-side checks) and read the answer's first bytes."""
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
                data.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_a_declared_body_over_the_limit_is_413_before_it_is_read(small_limits) -> None:
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json"
            b"\r\ncontent-length: 52428800\r\n\r\n")
    answer = raw_request(small_limits, head)  # the 50 MB never sent: answered at once
    assert answer.startswith(b"HTTP/1.1 413")
    assert b"request_too_large" in answer
    head = head.replace(b"/v1/chat/completions", b"/v1/messages")
    answer = raw_request(small_limits, head)
    assert answer.startswith(b"HTTP/1.1 413") and b'"type":"error"' in answer


def test_a_chunked_body_over_the_limit_is_413(small_limits) -> None:
    def chunks():
        for _ in range(100):
            yield b"x" * 8192

    r = httpx.post(small_limits + "/v1/chat/completions", content=chunks())
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_headers_over_the_limit_are_431(small_limits) -> None:
    r = httpx.get(small_limits + "/healthz", headers={"x-big": "y" * 20000})
    assert r.status_code == 431
    assert r.json()["error"]["code"] == "request_header_fields_too_large"
    # normal requests on the same server are unaffected
    assert httpx.get(small_limits + "/healthz").status_code == 200
    r = httpx.post(small_limits + "/v1/chat/completions", content=b"{" * 30000)
    assert r.status_code == 400  # a big body (under the body limit) is not a big head
    r = httpx.post(small_limits + "/v1/messages", headers={"x-big": "y" * 20000}, json={})
    assert r.status_code == 431 and r.json()["type"] == "error"  # Anthropic's format there


def test_a_head_sent_in_pieces_is_refused_once_it_passes_the_bound(small_limits) -> None:
    u = urlparse(small_limits)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\n")
        answer = b""
        try:
            for _ in range(40):  # 40 KiB of header, a KiB at a time: never a complete head
                s.sendall(b"x-pad: " + b"z" * 1015 + b"\r\n")
        except OSError:
            pass  # the server may close (after its answer) before we are done
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431")


async def test_a_callers_tool_schemas_are_checked_once_and_a_bad_one_every_time(
        client, monkeypatch) -> None:
    """A coding agent sends the same tool definitions at every turn: a schema that passed is
    remembered under the caller's key (the meta-schema walk is not done again), another key's
    request is checked anew, and a hostile schema is refused however often it comes."""
    from jsonschema import Draft202012Validator

    from fastmode.backends.memo import Memo
    from fastmode.gateway.http import limits

    monkeypatch.setattr(limits, "_PASSED", Memo(1 << 20))
    walks: list[object] = []
    check = Draft202012Validator.check_schema
    monkeypatch.setattr(Draft202012Validator, "check_schema",
                        classmethod(lambda cls, s: walks.append(s) or check(s)))
    good = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    for key in ("sk-a", "sk-a", "sk-a", "sk-b"):
        r = await client.post("/v1/chat/completions", json=chat_tool(good),
                              headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
    assert len(walks) == 2  # once for sk-a, once for sk-b
    for _ in range(3):
        r = await client.post("/v1/chat/completions", json=chat_tool(HOSTILE_SCHEMAS[0][0]),
                              headers={"authorization": "Bearer sk-a"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_tool_schema"
    r = await client.post("/v1/messages", json={
        "model": "frontier", "max_tokens": 5, "messages": USER,
        "tools": [{"name": "f", "input_schema": good}]}, headers={"x-api-key": "sk-c"})
    assert r.status_code == 200, r.text
    assert len(walks) == 2 + 3 + 1  # the hostile schema walked each time; sk-c checked anew


def test_a_websocket_sessions_turns_check_its_tool_schemas_once(monkeypatch) -> None:
    from jsonschema import Draft202012Validator

    from fastmode.backends.memo import Memo
    from fastmode.gateway.http import limits

    monkeypatch.setattr(limits, "_PASSED", Memo(1 << 20))
    walks: list[object] = []
    check = Draft202012Validator.check_schema
    monkeypatch.setattr(Draft202012Validator, "check_schema",
                        classmethod(lambda cls, s: walks.append(s) or check(s)))
    tools = [{"type": "function", "name": "read", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}]
    app = create_app()
    with TestClient(app) as tc, tc.websocket_connect(
            "/v1/responses", headers={"authorization": "Bearer sk-ws"}) as ws:
        for _ in range(3):
            ws.send_text(orjson.dumps({"type": "response.create", "model": "frontier",
                                       "input": "hi", "tools": tools,
                                       "max_output_tokens": 16}).decode())
            while (event := orjson.loads(ws.receive_text()))["type"] not in (
                    "response.completed", "response.incomplete", "response.failed", "error"):
                pass
            assert event["type"] in ("response.completed", "response.incomplete"), event
    assert len(walks) == 1
