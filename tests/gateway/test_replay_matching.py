"""Replay's matchers, misses and redaction (fastmode/gateway/cassettes/library.py, matching.py,
format.py): which recorded exchange a request gets, the 404 that names the nearest one in the
route's own format, the mock model on a miss when asked, and what never reaches a cassette."""

from __future__ import annotations

import sys
from pathlib import Path

import anthropic
import orjson
import pytest
from pydantic import ValidationError
from replay_session import (
    USER,
    post,
    recording_locally,
    replaying,
    sse_data,
    websocket,
)

from fastmode.gateway.cassette_config import RecordConfig
from fastmode.gateway.observe.exchange_format import read

CHAT = {"model": "frontier", "messages": USER, "max_tokens": 12}
MESSAGES = {"model": "frontier", "max_tokens": 12, "messages": USER}


def cassette_text(directory: Path) -> str:
    return "".join(p.read_text() for p in directory.glob("*.jsonl"))


async def test_a_miss_names_the_nearest_entry_in_each_routes_format(tmp_path) -> None:
    d = tmp_path / "c"
    async with recording_locally(d) as url:
        await post(url, "/v1/chat/completions", CHAT)
        await post(url, "/v1/messages", MESSAGES)
        await post(url, "/v1/responses", {"model": "frontier", "input": "hi"})
    (chat,) = [line for line in read(d) if line.entry.protocol == "chat"]
    async with replaying(d) as (url, _):
        other = {**CHAT, "messages": [{"role": "user", "content": "Something else"}]}
        r = await post(url, "/v1/chat/completions", other)
        streamed = await post(url, "/v1/chat/completions", {**CHAT, "stream": True})
        client = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as exc:
            await client.messages.create(**{**MESSAGES, "max_tokens": 13})
        frames = await websocket(url, [{"model": "frontier", "input": "bye"}])
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "cassette_miss" and err["type"] == "invalid_request_error"
    assert f"Nearest: {chat.where} (id {chat.entry.id})" in err["message"]
    assert 'differs at messages[0].content: recorded "Tell me about' in err["message"]
    assert "was recorded not streamed" in streamed.json()["error"]["message"]
    assert exc.value.body["type"] == "error"  # Anthropic's error body
    assert exc.value.body["error"]["type"] == "not_found_error"
    assert "differs at max_tokens: recorded 12, sent 13" in exc.value.body["error"]["message"]
    (event,) = [orjson.loads(f) for f in frames]
    assert event["type"] == "error" and event["status"] == 404
    assert "differs at input" in event["error"]["message"]


async def test_a_miss_goes_to_the_mock_model_when_asked(tmp_path) -> None:
    d = tmp_path / "c"
    async with recording_locally(d) as url:
        recorded = await post(url, "/v1/chat/completions", CHAT)
    async with replaying(d, miss="mock") as (url, _):
        hit = await post(url, "/v1/chat/completions", CHAT)
        miss = await post(url, "/v1/chat/completions", {**CHAT, "max_tokens": 5})
    assert hit.content == recorded.content
    (line,) = read(d)
    assert hit.headers["x-fastmode-cassette"] == line.where
    assert hit.headers["x-request-id"] == line.entry.id  # the recorded request's id
    assert miss.status_code == 200 and miss.json()["usage"]["completion_tokens"] <= 5
    assert "x-fastmode-cassette" not in miss.headers
    assert miss.json()["id"] != recorded.json()["id"]


async def test_ignored_fields_last_user_and_header_matchers(tmp_path) -> None:
    d = tmp_path / "c"
    body = {**CHAT, "metadata": {"run": "1"},
            "messages": [{"role": "system", "content": "Be terse."}, *USER]}
    async with recording_locally(d) as url:
        recorded = await post(url, "/v1/chat/completions", body,
                              headers={"x-request-id": "step-1"})
    (entry,) = [line.entry for line in read(d)]
    assert entry.headers == {"x-request-id": "step-1"}
    rerun = {**body, "metadata": {"run": "2"}}
    async with replaying(d) as (url, _):
        assert (await post(url, "/v1/chat/completions", rerun)).status_code == 404
    async with replaying(d, ignore=["metadata.run"]) as (url, _):
        assert (await post(url, "/v1/chat/completions", rerun)).content == recorded.content
    reworded = {**rerun, "messages": [{"role": "system", "content": "Be verbose."}, *USER]}
    async with replaying(d, match="last_user") as (url, _):
        assert (await post(url, "/v1/chat/completions", reworded)).content == recorded.content
    async with replaying(d, match="header") as (url, _):
        hit = await post(url, "/v1/chat/completions", {**CHAT, "max_tokens": 3},
                         headers={"x-request-id": "step-1"})
        miss = await post(url, "/v1/chat/completions", CHAT, headers={"x-request-id": "step-2"})
    assert hit.content == recorded.content
    assert miss.status_code == 404 and "has x-request-id: 'step-1'" in miss.json()["error"][
        "message"]


async def test_the_same_request_recorded_twice_is_replayed_in_turn(tmp_path) -> None:
    d = tmp_path / "c"
    async with recording_locally(d) as url:
        first = await post(url, "/v1/chat/completions", CHAT)
        second = await post(url, "/v1/chat/completions", CHAT)
    assert first.content != second.content  # two exchanges (their ids differ at least)
    async with replaying(d) as (url, _):
        got = [(await post(url, "/v1/chat/completions", CHAT)).content for _ in range(3)]
    assert got == [first.content, second.content, first.content]


async def test_credentials_never_reach_a_cassette(tmp_path) -> None:
    d = tmp_path / "c"
    key = "sk-test-0123456789abcdefghijklmn"
    auth = {"enabled": True, "keys": [{"key": key}]}
    pasted = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX"
    body = {**CHAT, "messages": [{"role": "user", "content": f"Is {pasted} a valid key?"}]}
    async with recording_locally(d, auth=auth, record={"headers": ["x-request-id"]}) as url:
        r = await post(url, "/v1/chat/completions", body,
                       headers={"authorization": f"Bearer {key}", "x-api-key": key,
                                "x-request-id": "r1"})
        assert r.status_code == 200
    text = cassette_text(d)
    assert key not in text and pasted not in text and "x-api-key" not in text
    (entry,) = [line.entry for line in read(d)]
    assert entry.request["messages"][0]["content"] == "Is [REDACTED] a valid key?"
    assert entry.headers == {"x-request-id": "r1"}
    with pytest.raises(ValidationError, match="credential"):
        RecordConfig(dir="x", headers=["Authorization"])
    # the same request (secret included) is redacted alike before it is matched
    async with replaying(d, {"auth": auth}) as (url, _):
        again = await post(url, "/v1/chat/completions", body,
                           headers={"authorization": f"Bearer {key}"})
    assert again.content == r.content


async def test_the_redaction_hook_edits_and_drops_entries(tmp_path, monkeypatch) -> None:
    (tmp_path / "scrub_hook.py").write_text(
        "def scrub(entry):\n"
        "    if (entry['request'].get('metadata') or {}).get('private'):\n"
        "        return None\n"
        "    entry['request'] = {**entry['request'], 'user': 'someone'}\n"
        "    return entry\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    d = tmp_path / "c"
    hooked = {"redact_hook": "scrub_hook:scrub"}
    async with recording_locally(d, record=hooked) as url:
        await post(url, "/v1/chat/completions", {**CHAT, "user": "ada@example.com"})
        await post(url, "/v1/chat/completions", {**CHAT, "metadata": {"private": "yes"}})
    (entry,) = [line.entry for line in read(d)]
    assert entry.request["user"] == "someone" and "ada@" not in cassette_text(d)
    async with replaying(d, {"record": hooked}) as (url, _):  # requests hooked alike
        r = await post(url, "/v1/chat/completions", {**CHAT, "user": "bob@example.com"})
    assert r.status_code == 200
    sys.modules.pop("scrub_hook", None)


async def test_an_upstream_failure_mid_stream_replays_as_recorded(tmp_path) -> None:
    """A provider that breaks off: its error event is part of the exchange, and replays."""
    from replay_session import config
    from test_remote import Fake, serve

    from fastmode.gateway.app import create_app

    fake = Fake()
    fake.mode = "die"
    d = tmp_path / "c"
    async with serve(fake.app) as upstream:
        remote = {"tiers": {"standard": {"upstreams": [upstream]}}}
        async with serve(create_app(config(remote=remote, record={"dir": str(d)}))) as url:
            recorded = await post(url, "/v1/chat/completions", {**CHAT, "stream": True})
    assert "upstream_disconnected" in recorded.text
    async with replaying(d) as (url, _):
        replayed = await post(url, "/v1/chat/completions", {**CHAT, "stream": True})
    assert replayed.content == recorded.content
    assert sse_data(replayed.content)[-1]["error"]["code"] == "upstream_disconnected"


async def test_faults_apply_to_a_replayed_stream(tmp_path) -> None:
    """A replay runs the one pipeline: an injected error event ends the recorded stream after
    the events asked for, numbered after them."""
    d = tmp_path / "c"
    body = {"model": "frontier", "input": "hi", "stream": True}
    async with recording_locally(d) as url:
        recorded = sse_data((await post(url, "/v1/responses", body)).content)
    async with replaying(d) as (url, _):
        r = await post(url, "/v1/responses", body,
                       headers={"x-fastmode-fault": "error-event;after=4"})
    events = sse_data(r.content)
    assert events[:-1] == recorded[:len(events) - 1] and len(events) < len(recorded)
    assert events[-1]["type"] == "response.failed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert r.headers["x-fastmode-fault-injected"] == "error-event"
