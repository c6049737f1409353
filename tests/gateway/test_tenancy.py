"""Tenants cannot see each other.

Two API keys on one gateway with auth on, over both state backends (the SQLite file and a real
Redis), driven with the official openai SDK as users drive it:

* a stored response belongs to the key that created it: another key gets 404 on retrieve,
  ``input_items`` and delete (the answer an unknown id gets, so existence is not revealed), a
  request without a key 401; the admin key reads all;
* ``previous_response_id`` of another key's response is ``previous_response_not_found``, over
  HTTP and over the websocket;
* response ids are random (no per-process counter to walk);
* no raw API key is kept at rest (ledger file, Redis key names and values), and ``/v1/usage``
  still shows a key its own usage (the admin all);
* a 401 does not echo the key it refused.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from configs import with_keys
from conftest import launch, quick_config_text, stop_server
from test_redis_state import REDIS, redis_server

from fastmode.gateway.values.ids import new_id

KEY_A = "sk-tenant-a-7f3c9e1d5b2a46807f3c9e1d5b2a4680"
KEY_B = "sk-tenant-b-0c8e6a4f2d1b39570c8e6a4f2d1b3957"
ADMIN_KEY = "adm-tenancy-5e2b8c0a9d7f1346"
SECRETS = (KEY_A, KEY_B)
ENDED = ("response.completed", "response.incomplete")  # (incomplete: max_output_tokens)
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}


def config(tmp: Path, redis_url: str = "") -> str:
    text = quick_config_text()
    auth = text.index("[auth]\nenabled = false")
    end = text.index("\n", auth + len("[auth]\n"))
    # key A has a limit on spark: its buckets are kept in the state too (Redis key names)
    text = text[:auth] + f"""[auth]
enabled = true
[[auth.keys]]
key = "{KEY_A}"
[auth.keys.limits.spark]
requests_per_minute = 1000
tokens_per_minute = 10000000
[[auth.keys]]
key = "{KEY_B}"
""" + text[end + 1:]
    text += f'\n[admin]\nenabled = true\nkey = "{ADMIN_KEY}"\n'
    return with_keys("state", text, path=f'"{tmp / "ledger.sqlite3"}"',
                     redis_url=f'"{redis_url}"', flush_interval_s=0.05)


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def gateway(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A gateway with auth on (keys A and B) and the admin API, on the given state backend."""
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "redis":
        assert REDIS is not None, "redis-server is not installed (apt-get install redis-server)"
        with redis_server(tmp) as url:
            proc, base = launch(config_text=config(tmp, url), tmp=tmp)
            try:
                yield {"url": base, "backend": "redis", "redis": url, "tmp": tmp}
            finally:
                stop_server(proc)
    else:
        proc, base = launch(config_text=config(tmp), tmp=tmp)
        try:
            yield {"url": base, "backend": "sqlite", "ledger": tmp / "ledger.sqlite3",
                   "tmp": tmp}
        finally:
            stop_server(proc)


def sdk(base: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_a_stored_response_is_its_keys_alone(gateway: dict[str, Any]) -> None:
    base = gateway["url"]
    a, b, admin = sdk(base, KEY_A), sdk(base, KEY_B), sdk(base, ADMIN_KEY)
    mine = a.responses.create(model="frontier-spark", input="My secret plan: tulips.",
                              max_output_tokens=6)
    assert a.responses.retrieve(mine.id).id == mine.id  # its owner reads it
    assert a.responses.input_items.list(mine.id).data
    for read in (lambda: b.responses.retrieve(mine.id),
                 lambda: b.responses.input_items.list(mine.id),
                 lambda: b.responses.delete(mine.id)):
        with pytest.raises(openai.NotFoundError) as e:
            read()
        # the same answer as an id nobody stored: existence is not revealed
        assert e.value.body["code"] == "not_found" and "tulips" not in e.value.response.text
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve("resp_" + "0" * 24)
    for method, path in (("GET", f"/v1/responses/{mine.id}"),
                         ("GET", f"/v1/responses/{mine.id}/input_items"),
                         ("DELETE", f"/v1/responses/{mine.id}"),
                         ("GET", f"/fast/v1/responses/{mine.id}")):
        r = httpx.request(method, base + path, timeout=10)
        assert r.status_code == 401, (method, path, r.text)
        assert "tulips" not in r.text
        bad = httpx.request(method, base + path, headers=bearer("sk-nobody-" + "9" * 30),
                            timeout=10)
        assert bad.status_code == 401
    # B's delete deleted nothing; the admin key reads everyone's
    assert a.responses.retrieve(mine.id).status == mine.status
    assert admin.responses.retrieve(mine.id).id == mine.id
    a.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(mine.id)


def test_another_keys_response_cannot_be_continued_over_http(gateway: dict[str, Any]) -> None:
    base = gateway["url"]
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    first = a.responses.create(model="frontier-spark", input="Remember: blue.",
                               max_output_tokens=6)
    with pytest.raises(openai.BadRequestError) as e:
        b.responses.create(model="frontier-spark", input="What colour?", max_output_tokens=6,
                           previous_response_id=first.id)
    assert e.value.body["code"] == "previous_response_not_found"
    assert e.value.body["param"] == "previous_response_id"
    r = httpx.post(base + "/v1/responses", timeout=10, json={
        "model": "frontier-spark", "input": "x", "previous_response_id": first.id})
    assert r.status_code == 401
    # its owner continues it
    second = a.responses.create(model="frontier-spark", input="What colour?",
                                max_output_tokens=6, previous_response_id=first.id)
    assert second.usage.input_tokens_details.cached_tokens == (
        first.usage.input_tokens + first.usage.output_tokens)


async def _ws_turn(conn: Any, **body: Any) -> Any:
    await conn.response.create(**body)
    async for event in conn:
        if event.type in TERMINAL or type(event).__name__ == "ResponseWsError":
            return event
    raise AssertionError("the socket closed before a terminal event")


async def test_another_keys_response_cannot_be_continued_over_the_websocket(
        gateway: dict[str, Any]) -> None:
    base = gateway["url"]
    a = openai.AsyncOpenAI(base_url=base + "/v1", api_key=KEY_A, max_retries=0)
    b = openai.AsyncOpenAI(base_url=base + "/v1", api_key=KEY_B, max_retries=0)
    try:
        async with a.responses.connect() as conn_a, b.responses.connect() as conn_b:
            done = await _ws_turn(conn_a, model="frontier-spark", input="Remember: green.",
                                  max_output_tokens=6)
            assert done.type in ENDED
            first = done.response
            # stored by A's socket: B's socket cannot continue it (nor can B over HTTP)
            err = await _ws_turn(conn_b, model="frontier-spark", input="Colour?",
                                 max_output_tokens=6, previous_response_id=first.id)
            assert err.status == 400 and err.error.code == "previous_response_not_found"
            # A continues it, on its socket and on a new one
            again = await _ws_turn(conn_a, model="frontier-spark", input="Colour?",
                                   max_output_tokens=6, previous_response_id=first.id)
            assert again.type in ENDED
        async with a.responses.connect() as conn_a2:
            later = await _ws_turn(conn_a2, model="frontier-spark", input="And now?",
                                   max_output_tokens=6, previous_response_id=first.id)
            assert later.type in ENDED
    finally:
        await a.close()
        await b.close()


def test_response_ids_are_random(gateway: dict[str, Any]) -> None:
    a = sdk(gateway["url"], KEY_A)
    ids = [a.responses.create(model="frontier-spark", input="hi", max_output_tokens=2).id
           for _ in range(3)] + [new_id("req").replace("req-", "resp_") for _ in range(3)]
    for rid in ids:
        random_part = rid.removeprefix("resp_")
        assert rid.startswith("resp_") and re.fullmatch(r"[0-9a-f]+", random_part)
        assert len(random_part) * 4 >= 96, rid  # at least 96 bits of randomness
    # nothing shared between two ids: no per-process prefix, no counter to walk
    parts = [rid.removeprefix("resp_") for rid in ids]
    for i, x in enumerate(parts):
        for y in parts[i + 1:]:
            assert x[:6] != y[:6] and x[-8:] != y[-8:]
            assert abs(int(x[-8:], 16) - int(y[-8:], 16)) > 16


def test_a_fault_rule_for_one_key_keeps_its_id(gateway: dict[str, Any]) -> None:
    """An admin rule scoped to a key is kept in the shared state: as the key's id, and it still
    applies to that key alone (the scan of the state below covers the rule too)."""
    base, scope = gateway["url"], {"x-fastmode-test-id": "tenancy-rule"}
    r = httpx.post(base + "/admin/faults", headers={**bearer(ADMIN_KEY), **scope}, timeout=10,
                   json={"kind": "503", "key": KEY_B, "name": "b-only"})
    assert r.status_code == 201 and r.json()["key"] != KEY_B
    listed = httpx.get(base + "/admin/faults", headers={**bearer(ADMIN_KEY), **scope},
                       timeout=10).json()["data"]
    assert [rule["key"] for rule in listed] == [r.json()["key"]]
    body = {"model": "frontier-spark", "max_tokens": 2,
            "messages": [{"role": "user", "content": "x"}]}
    hit = httpx.post(base + "/v1/chat/completions", headers={**bearer(KEY_B), **scope},
                     json=body, timeout=10)
    missed = httpx.post(base + "/v1/chat/completions", headers={**bearer(KEY_A), **scope},
                        json=body, timeout=10)
    assert hit.status_code == 503 and missed.status_code == 200


def _redis_dump(url: str) -> bytes:
    """Every key name and every value in the Redis database, as one blob."""
    import redis

    r = redis.Redis.from_url(url)
    out = []
    try:
        for key in r.scan_iter(count=1000):
            out.append(key)
            kind = r.type(key)
            if kind == b"string":
                out.append(r.get(key) or b"")
            elif kind == b"hash":
                out += [x for kv in r.hgetall(key).items() for x in kv]
            elif kind == b"zset":
                out += r.zrange(key, 0, -1)
            elif kind == b"set":
                out += list(r.smembers(key))
            elif kind == b"list":
                out += r.lrange(key, 0, -1)
    finally:
        r.close()
    return b"\n".join(out)


def _ledger_files(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def test_no_raw_key_at_rest_and_usage_still_per_key(gateway: dict[str, Any]) -> None:
    base = gateway["url"]
    a, b = sdk(base, KEY_A), sdk(base, KEY_B)
    a.chat.completions.create(model="frontier-spark", max_completion_tokens=3,
                              messages=[{"role": "user", "content": "hi"}])  # A's buckets
    b.chat.completions.create(model="frontier", max_completion_tokens=3,
                              messages=[{"role": "user", "content": "hi"}])
    a.responses.create(model="frontier-spark", input="stored", max_output_tokens=3)
    # the admin's ledger read flushes the writes
    rows = httpx.get(base + "/admin/ledger", headers=bearer(ADMIN_KEY), timeout=10).json()
    assert len(rows["data"]) >= 3
    if gateway["backend"] == "redis":
        at_rest = _redis_dump(gateway["redis"])
        assert b"bucket" in at_rest and b"resp" in at_rest  # the scan saw what is kept
    else:
        time.sleep(0.2)  # the writer's next round (flush_interval_s 0.05)
        at_rest = _ledger_files(gateway["ledger"])
        assert b"frontier-spark" in at_rest
    for key in SECRETS:
        assert key.encode() not in at_rest, f"{key} is kept in the {gateway['backend']} state"
        assert key[-12:].encode() not in at_rest

    # /v1/usage: a key sees its own usage, the admin key everyone's
    mine = httpx.get(base + "/v1/usage", headers=bearer(KEY_A), timeout=10).json()["data"]
    theirs = httpx.get(base + "/v1/usage", headers=bearer(KEY_B), timeout=10).json()["data"]
    everyone = httpx.get(base + "/v1/usage", headers=bearer(ADMIN_KEY), timeout=10)
    assert everyone.status_code == 200, everyone.text
    ids_a = {d["api_key"] for d in mine}
    ids_b = {d["api_key"] for d in theirs}
    assert len(ids_a) == 1 and len(ids_b) == 1 and ids_a != ids_b  # each sees only its own
    assert {d["api_key"] for d in everyone.json()["data"]} >= ids_a | ids_b
    assert {d["tier"] for d in mine} == {"spark"} and {d["tier"] for d in theirs} == {
        "standard"}
    shown = str(rows) + str(mine) + str(theirs) + everyone.text
    assert not any(key in shown for key in SECRETS)


async def test_a_401_does_not_echo_the_key(gateway: dict[str, Any]) -> None:
    base = gateway["url"]
    short, long = "zq8wx7vjm", "sk-proj-" + "Q7d2Kx9ZpL4mT8vR3nB6yH1cF5gJ0wE2"
    async with httpx.AsyncClient(base_url=base, timeout=10) as c:
        for key in (short, long):
            for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
                r = await c.post(path, headers=bearer(key), json={
                    "model": "frontier", "max_tokens": 2, "input": "x",
                    "messages": [{"role": "user", "content": "x"}]})
                assert r.status_code == 401
                text = r.text
                # at most OpenAI's redacted form of a long key: its prefix and last four
                n = 3 if key is short else 5
                assert not any(key[i:i + n] in text for i in range(len(key) - n + 1)), text
    with pytest.raises(openai.AuthenticationError) as e:
        sdk(base, short).responses.create(model="frontier", input="x")
    assert "zq8" not in str(e.value) and "7vjm" not in str(e.value)
