"""What a client was told exists survives a Redis outage, for every stored kind, against a real
``redis-server`` (stopped, then started again) and a real ``fastmode serve``.

Each kind is made while Redis is away (a 200 and an id), read back by its owner meanwhile, and
read again after Redis is back and the worker wrote what it held: stored responses and their
input items, stored Chat Completions, files, batches, traces and compaction items (a list of
stored Chat Completions needs every worker's, so it is a 503 until Redis is back). The outage
is logged in one line and its end in one, with no traceback. Past ``[state] pending_max``
waiting writes, a new request is a 503, and every object made before it is still kept."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import launch, stop_server
from test_redis_outage import AUTH, REDIS, RedisServer, assert_unavailable, config, log_lines

pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")

HI = [{"role": "user", "content": "Tell me about caches"}]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    try:
        yield server
    finally:
        server.close()


def serve(redis_server: RedisServer, tmp_path: Path,
          extra: str = "") -> tuple[Any, str, Path]:
    text = config(redis_server.url).replace("limits_fail_open = false\n",
                                            "limits_fail_open = false\n" + extra)
    log_path = tmp_path / "gateway.log"
    log = log_path.open("w+b")
    proc, url = launch(config_text=text, tmp=tmp_path, log=log)
    return proc, url, log_path


@pytest.fixture
def gateway(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    proc, url, log = serve(redis_server, tmp_path)
    try:
        yield url, log
    finally:
        stop_server(proc)


def call(url: str, method: str, route: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, url + route, headers={**AUTH, **kw.pop("headers", {})},
                         timeout=30, **kw)


def ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, (r.status_code, r.text)
    body: dict[str, Any] = r.json()
    return body


def chat_made(url: str) -> dict[str, str]:
    return {"chat": ok(call(url, "POST", "/v1/chat/completions", json={
        "model": "frontier", "messages": HI, "max_tokens": 4, "store": True}))["id"]}


def chat_read(url: str, ids: dict[str, str], during: bool = False) -> None:
    assert ok(call(url, "GET", f"/v1/chat/completions/{ids['chat']}"))["id"] == ids["chat"]
    messages = ok(call(url, "GET", f"/v1/chat/completions/{ids['chat']}/messages"))
    assert [m["content"] for m in messages["data"]] == [HI[0]["content"]]
    listed = call(url, "GET", "/v1/chat/completions")
    if during:  # a list needs every worker's objects: Redis's, so it waits for Redis
        assert_unavailable("chat", listed)
    else:
        assert ids["chat"] in {c["id"] for c in ok(listed)["data"]}


def response_made(url: str) -> dict[str, str]:
    resp = ok(call(url, "POST", "/v1/responses", json={
        "model": "frontier", "input": "Tell me about caches", "max_output_tokens": 4}))
    follow = ok(call(url, "POST", "/v1/responses", json={  # continued from the held response
        "model": "frontier", "input": "and more", "max_output_tokens": 4,
        "previous_response_id": resp["id"]}))
    return {"response": resp["id"], "follow": follow["id"]}


def response_read(url: str, ids: dict[str, str], during: bool = False) -> None:
    for rid in (ids["response"], ids["follow"]):
        assert ok(call(url, "GET", f"/v1/responses/{rid}"))["id"] == rid


def input_items_read(url: str, ids: dict[str, str], during: bool = False) -> None:
    items = ok(call(url, "GET", f"/v1/responses/{ids['response']}/input_items"))
    assert [i["content"][0]["text"] for i in items["data"]] == ["Tell me about caches"]
    items = ok(call(url, "GET", f"/v1/responses/{ids['follow']}/input_items"))
    assert "and more" in orjson.dumps(items["data"]).decode()


BATCH_LINE = (b'{"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions", "body": '
              b'{"model": "frontier", "max_tokens": 4, "messages": [{"role": "user", '
              b'"content": "hi"}]}}\n')


def file_made(url: str) -> dict[str, str]:
    return {"file": ok(call(url, "POST", "/v1/files", data={"purpose": "batch"},
                            files={"file": ("b.jsonl", BATCH_LINE)}))["id"]}


def file_read(url: str, ids: dict[str, str], during: bool = False) -> None:
    assert ok(call(url, "GET", f"/v1/files/{ids['file']}"))["id"] == ids["file"]
    content = call(url, "GET", f"/v1/files/{ids['file']}/content")
    assert content.status_code == 200 and content.content == BATCH_LINE


def batch_made(url: str) -> dict[str, str]:
    ids = file_made(url)
    ids["batch"] = ok(call(url, "POST", "/v1/batches", json={
        "input_file_id": ids["file"], "endpoint": "/v1/chat/completions",
        "completion_window": "24h"}))["id"]
    return ids


def batch_read(url: str, ids: dict[str, str], during: bool = False) -> None:
    batch = ok(call(url, "GET", f"/v1/batches/{ids['batch']}"))
    assert batch["id"] == ids["batch"] and batch["input_file_id"] == ids["file"]


def trace_made(url: str) -> dict[str, str]:
    traced = call(url, "POST", "/v1/chat/completions", headers={"x-fastmode-trace": "1"},
                  json={"model": "frontier", "messages": HI, "max_tokens": 3})
    ok(traced)
    return {"trace": traced.headers["x-request-id"]}


def trace_read(url: str, ids: dict[str, str], during: bool = False) -> None:
    traces = call(url, "GET", "/v1/fastmode/traces")
    assert traces.status_code == 200 and ids["trace"] in traces.text


def compaction_made(url: str) -> dict[str, str]:
    compaction = ok(call(url, "POST", "/v1/responses/compact", json={
        "model": "frontier", "input": [{"role": "user", "content": "Tell me about caches"},
                                       {"role": "assistant", "content": "Caches keep " * 40}]}))
    return {"compaction": compaction["output"][-1]["encrypted_content"]}


def compaction_read(url: str, ids: dict[str, str], during: bool = False) -> None:
    later = ok(call(url, "POST", "/v1/responses", json={  # the compaction item still opens
        "model": "frontier", "max_output_tokens": 4, "input": [
            {"type": "compaction", "encrypted_content": ids["compaction"]},
            {"role": "user", "content": "go on"}]}))
    assert later["object"] == "response"


# kind -> (make one while Redis is away, read it back, the Redis keys it must be under after)
KINDS: dict[str, tuple[Any, Any, Any]] = {
    "chat completions": (chat_made, chat_read,
                         lambda ids: [f"fastmode:obj:chat.completion:{ids['chat']}"]),
    "responses": (response_made, response_read,
                  lambda ids: [f"fastmode:resp:{ids['response']}",
                               f"fastmode:resp:{ids['follow']}"]),
    "input items": (response_made, input_items_read,
                    lambda ids: [f"fastmode:resp:{ids['response']}"]),
    "files": (file_made, file_read, lambda ids: []),  # kept in the worker's memory
    "batches": (batch_made, batch_read, lambda ids: []),
    "traces": (trace_made, trace_read, lambda ids: []),
    "compaction items": (compaction_made, compaction_read, lambda ids: []),  # sealed
}


def wait_written(url: str, seconds: float = 15) -> None:
    """Until Redis is answering again (a limited request is served: the probe closed the
    breaker, after which the held writes went first)."""
    deadline = time.monotonic() + seconds
    while call(url, "POST", "/v1/chat/completions", json={
            "model": "frontier-spark", "messages": HI, "max_tokens": 2}).status_code != 200:
        assert time.monotonic() < deadline, "the gateway did not recover"
        time.sleep(0.05)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_stored_kind_made_in_an_outage_is_kept_and_written_after_it(
        gateway: tuple[str, Path], redis_server: RedisServer, kind: str) -> None:
    url, log = gateway
    made, read, keys = KINDS[kind]
    read(url, made(url))  # Redis up: the usual path
    redis_server.kill()
    ids = made(url)  # Redis away: a 200 and an id
    read(url, ids, during=True)  # ... read by its owner from the worker holding it
    redis_server.start()  # empty (no persistence): what is in it after, the gateway wrote
    wait_written(url)
    read(url, ids)
    import redis

    client = redis.Redis(port=redis_server.port)
    try:
        for key in keys(ids):
            assert client.exists(key), key
    finally:
        client.close()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text
    assert len(log_lines(log, "state unavailable")) == 1, text
    assert len(log_lines(log, "state available again")) == 1, text


def test_past_the_cap_a_request_is_a_503_and_nothing_made_is_dropped(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """``pending_max = 6``: each stored turn holds its object and its ledger row, so some are
    made; then a 503 in the route's format; after Redis is back all the made ones are read."""
    proc, url, log = serve(redis_server, tmp_path, "pending_max = 6\n")
    try:
        redis_server.kill()
        made: list[str] = []
        for _ in range(10):
            r = call(url, "POST", "/v1/chat/completions", json={
                "model": "frontier", "messages": HI, "max_tokens": 2, "store": True})
            if r.status_code != 200:
                break
            made.append(r.json()["id"])
        assert made and len(made) < 10, made
        assert_unavailable("chat", r)
        assert "pending_max" in r.json()["error"]["message"]
        assert r.json()["error"]["code"] == "state_unavailable"
        redis_server.start()
        wait_written(url)
        for cid in made:
            assert ok(call(url, "GET", f"/v1/chat/completions/{cid}"))["id"] == cid
        listed = ok(call(url, "GET", "/v1/chat/completions", params={"limit": "100"}))
        assert {c["id"] for c in listed["data"]} >= set(made)
    finally:
        stop_server(proc)
    assert "Traceback" not in log.read_text(errors="replace")
