"""Hostile requests: heavy work leaves the event loop and is bounded, small malformed
fields are 400s in the route's own format (HTTP and websocket), never a 500 or a silent 200.

How long the loop stalls is measured by ``bench/hostile.py``; here: *where* the work runs
(a worker thread for a large body), and that a prompt past every context window is refused
once counting passes the window, not after counting all of it."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from test_openai_sdk import USER

from fastmode.backends.mockmodel import CUE_CHARS, cue_text
from fastmode.backends.tokenizer import CHUNK_TOKENS
from fastmode.gateway import protocols
from fastmode.gateway.app import create_app
from fastmode.gateway.http import offload


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app()
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t", timeout=60) as c:
        yield c
    await ctx.__aexit__(None, None, None)


BAD_PART = [{"type": [], "text": "hi"}]
BAD_PART_BODIES = [
    ("/v1/chat/completions", {"model": "frontier", "max_tokens": 5,
                              "messages": [{"role": "user", "content": BAD_PART}]},
     "messages[0].content[0].type"),
    ("/v1/responses", {"model": "frontier", "input": [{"role": "user", "content": BAD_PART}]},
     "input[0].content[0].type"),
    ("/v1/messages", {"model": "frontier", "max_tokens": 5,
                      "messages": [{"role": "user", "content": BAD_PART}]},
     "messages[0].content[0].type"),
]


def assert_400(r: httpx.Response, path: str, param: str) -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    if path.endswith("/messages"):  # Anthropic's format: the field named in the message
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert param in body["error"]["message"], body
    else:
        assert body["error"]["param"].startswith(param), body  # (a schema's: where in it)


@pytest.mark.parametrize("path,body,param", BAD_PART_BODIES)
async def test_a_content_part_type_that_is_not_a_string_is_a_400(client, path, body,
                                                                 param) -> None:
    assert_400(await client.post(path, json=body), path, param)


def test_a_content_part_type_that_is_not_a_string_is_an_error_event_on_the_websocket() -> None:
    with TestClient(create_app()) as tc, tc.websocket_connect("/v1/responses") as ws:
        ws.send_text(orjson.dumps({"type": "response.create", **BAD_PART_BODIES[1][1]}).decode())
        event = orjson.loads(ws.receive_text())
        assert event["type"] == "error" and event["status"] == 400, event
        assert event["error"]["param"] == "input[0].content[0].type"


CAPS = [
    ("/v1/chat/completions", {"model": "frontier", "messages": USER}, "max_tokens"),
    ("/v1/chat/completions", {"model": "frontier", "messages": USER}, "max_completion_tokens"),
    ("/v1/responses", {"model": "frontier", "input": "hi"}, "max_output_tokens"),
    ("/v1/messages", {"model": "frontier", "messages": USER}, "max_tokens"),
    ("/v1/completions", {"model": "frontier", "prompt": "hi"}, "max_tokens"),
]


@pytest.mark.parametrize("path,body,field", CAPS)
@pytest.mark.parametrize("value", ["64", True, 64.0])
async def test_a_token_cap_must_be_an_integer(client, path, body, field, value) -> None:
    assert_400(await client.post(path, json={**body, field: value}), path, field)
    ok = await client.post(path, json={**body, field: 4})
    assert ok.status_code == 200, ok.text


RECURSIVE = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
FORMATS = [
    ("/v1/chat/completions",
     {"model": "frontier", "max_tokens": 50, "messages": USER, "response_format": {
         "type": "json_schema", "json_schema": {"name": "r", "schema": RECURSIVE}}},
     "response_format.json_schema.schema"),
    ("/v1/responses",
     {"model": "frontier", "max_output_tokens": 50, "input": "hi", "text": {"format": {
         "type": "json_schema", "name": "r", "schema": RECURSIVE}}},
     "text.format.schema"),
    ("/v1/messages",
     {"model": "frontier", "max_tokens": 50, "messages": USER, "output_config": {
         "format": {"type": "json_schema", "schema": RECURSIVE}}},
     "output_config.format.schema"),
]


@pytest.mark.parametrize("path,body,param", FORMATS)
async def test_a_structured_output_schema_that_recurses_forever_is_a_400(client, path, body,
                                                                         param) -> None:
    r = await client.post(path, json=body)
    assert_400(r, path, param)
    if not path.endswith("/messages"):
        assert r.json()["error"]["code"] == "invalid_json_schema"


async def test_a_structured_output_enum_over_the_bound_is_a_400(client) -> None:
    schema = {"type": "object", "properties": {"x": {"enum": list(range(5000))}}}
    r = await client.post("/v1/chat/completions", json={
        "model": "frontier", "max_tokens": 5, "messages": USER, "response_format": {
            "type": "json_schema", "json_schema": {"name": "e", "schema": schema}}})
    assert_400(r, "/v1/chat/completions", "response_format.json_schema.schema.properties.x.enum")


async def test_content_parts_are_counted(client) -> None:
    parts = [{"type": "text", "text": "a"}] * 20_000
    r = await client.post("/v1/chat/completions", json={
        "model": "frontier", "max_tokens": 5, "messages": [{"role": "user", "content": parts}]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "too_many_items"


async def test_a_prompt_past_every_context_window_stops_being_counted(client) -> None:
    window = max(t.context_window for t in create_app().state.gateway.spec.tiers.values())
    for path, body in [
        ("/v1/chat/completions", {"model": "frontier", "max_tokens": 5,
                                  "messages": [{"role": "user", "content": "." * (window * 3)}]}),
        ("/v1/responses", {"model": "frontier", "input": "." * (window * 3)}),
        ("/v1/completions", {"model": "frontier", "prompt": "." * (window * 3)}),
    ]:
        r = await client.post(path, json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "context_length_exceeded"
        counted = int(err["message"].split("counting stopped at ")[1].split()[0])
        assert window < counted <= window + CHUNK_TOKENS  # not the 3x window it holds


async def test_the_count_tokens_route_is_bounded_the_same_way(client) -> None:
    r = await client.post("/v1/messages/count_tokens", json={
        "model": "frontier", "messages": [{"role": "user", "content": "." * 1_300_000}]})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert "counting stopped" in r.json()["error"]["message"]
    r = await client.post("/v1/messages/count_tokens", json={"model": "frontier",
                                                             "messages": USER})
    assert r.status_code == 200 and r.json()["input_tokens"] > 0


async def test_a_large_body_is_parsed_and_translated_off_the_loop(client, monkeypatch) -> None:
    """Where the work runs: the loop's thread for a small body, a worker thread for a large
    one (validation and translation, tokenizing included)."""
    chat = protocols.ENDPOINTS["/chat/completions"]
    threads: list[str] = []
    translate = type(chat).translate

    def spy(self: Any, req: Any, ctx: Any) -> Any:
        threads.append(threading.current_thread().name)
        return translate(self, req, ctx)

    monkeypatch.setattr(type(chat), "translate", spy)
    loop_thread = threading.current_thread().name
    small = {"model": "frontier", "max_tokens": 3, "messages": USER}
    large = {**small, "messages": [{"role": "user", "content": "hello " * 20_000}]}
    assert len(orjson.dumps(large)) > offload.OFFLOAD_BYTES > len(orjson.dumps(small))
    for body in (small, large):
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
    assert threads[0] == loop_thread
    assert threads[1] != loop_thread and threads[1].startswith("fastmode-request")


def test_the_mock_model_reads_the_ends_of_a_long_message() -> None:
    text = "Explain it in three sentences. " + "filler " * 100_000 + "Thanks!"
    cue = cue_text(text)
    assert len(cue) == 2 * CUE_CHARS + 1
    assert cue.startswith("Explain it in three sentences.") and cue.endswith("Thanks!")
    assert cue_text("short") == "short"


async def test_openapi_describes_the_count_tokens_body(client) -> None:
    spec = (await client.get("/openapi.json")).json()
    body = spec["paths"]["/v1/messages/count_tokens"]["post"]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    schema = spec["components"]["schemas"][ref]
    assert {"model", "messages", "tools", "system"} <= set(schema["properties"])
    assert "max_tokens" not in schema.get("required", [])



async def test_openapi_operation_ids_are_unique(client) -> None:
    """Client generators (openapi-generator, openapi-python-client) refuse a document whose
    operations share an id: GET and POST /ping once did (FastAPI names a route's operations
    after its first method)."""
    spec = (await client.get("/openapi.json")).json()
    ids = [op["operationId"] for methods in spec["paths"].values() for op in methods.values()]
    assert len(ids) > 20 and len(ids) == len(set(ids))
    assert {"get", "post"} <= set(spec["paths"]["/ping"])

def _marks(doc: Any) -> int:
    """``,`` ``:`` ``[`` ``{`` of ``doc``'s compact JSON outside strings, from the document."""
    if isinstance(doc, dict):
        return 1 + len(doc) + max(0, len(doc) - 1) + sum(_marks(v) for v in doc.values())
    if isinstance(doc, list):
        return 1 + max(0, len(doc) - 1) + sum(_marks(v) for v in doc)
    return 0


json_docs = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(alphabet=',:[]{}"\\ ab\n'),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(
        st.text(alphabet=',:[{"\\ a', max_size=4), kids, max_size=5),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(json_docs, st.integers(1, 4))
def test_values_are_counted_outside_strings(doc: Any, chunk: int) -> None:
    from fastmode.gateway.http import limits

    raw = orjson.dumps(doc)
    exact = _marks(doc)
    saved = limits._PIECES_PER_CHUNK
    limits._PIECES_PER_CHUNK = chunk  # chunks of a few pieces: every boundary is crossed
    try:
        assert limits.json_values(raw, exact) <= exact  # within the limit: never refused
        if exact:
            assert limits.json_values(raw, exact - 1) > exact - 1  # past it: always refused
    finally:
        limits._PIECES_PER_CHUNK = saved


async def test_a_body_of_too_many_values_is_refused_before_it_is_parsed(client,
                                                                        monkeypatch) -> None:
    calls: list[int] = []
    parse = offload.parse_json
    monkeypatch.setattr(offload, "parse_json", lambda raw: calls.append(1) or parse(raw))
    body = orjson.dumps({"model": "frontier", "max_tokens": 3, "messages": USER,
                         "junk": [[]] * 1_100_000})
    r = await client.post("/v1/chat/completions", content=body,
                          headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_values", r.text
    assert calls == []
    # strings full of commas are not values: a long prompt of them is served
    prose = {"model": "frontier", "max_tokens": 3,
             "messages": USER, "user": ",:[{" * 300_000}  # (a string not tokenized)
    r = await client.post("/v1/chat/completions", json=prose)
    assert r.status_code == 200, r.text
