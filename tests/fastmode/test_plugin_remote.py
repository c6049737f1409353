"""The plugin's per-test replies, faults and journal on a remote tier: the front gateway (the
one the test talks to) serves a tier from another fastmode gateway over HTTP. The test's
state is the front's, so the front applies it: the upstream never hears of the test."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import openai
import pytest

from fastmode.gateway.config import RemoteConfig, RemoteTierConfig, load_config
from fastmode.pytest_plugin import FastmodeTest
from fastmode.server import Server

ASK = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Server]:
    with Server(None, 0.01, admin_key=secrets.token_hex(8)) as server:
        yield server


@pytest.fixture(scope="module")
def front(upstream: Server) -> Iterator[Server]:
    base = load_config(None)
    config = base.model_copy(update={"remote": RemoteConfig(tiers={
        "standard": RemoteTierConfig(upstreams=[upstream.url])})})
    with Server(config, 0.01, admin_key=secrets.token_hex(8)) as server:
        yield server


@pytest.fixture
def remote(front: Server, request: pytest.FixtureRequest) -> Iterator[FastmodeTest]:
    test = FastmodeTest(front, f"t-{secrets.token_hex(6)}")
    yield test
    import httpx

    httpx.delete(f"{front.url}/admin/tests/{test.test_id}", headers=test._admin, timeout=10)


def _upstream_requests(upstream: Server) -> int:
    """The requests the upstream served on its standard tier (its own metrics)."""
    import httpx

    text = httpx.get(f"{upstream.url}/metrics", timeout=10).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("fastmode_requests_total{") and 'tier="standard"' in line))


def test_a_scripted_reply_on_a_remote_tier_is_the_fronts(remote, upstream) -> None:
    before = _upstream_requests(upstream)
    remote.reply(match="hello", text="scripted at the front", times=1)
    client = remote.openai(max_retries=0)
    first = client.chat.completions.create(model="frontier", messages=ASK)
    second = client.chat.completions.create(model="frontier", messages=ASK)
    assert first.choices[0].message.content == "scripted at the front"
    assert second.choices[0].message.content != "scripted at the front"
    calls = remote.requests
    assert [(c.tier, c.scripted) for c in calls] == [("standard", True), ("standard", False)]
    assert calls[1].reply["text"] == second.choices[0].message.content  # the upstream's
    assert calls[1].usage["output_tokens"] > 0
    assert _upstream_requests(upstream) == before + 1  # only the unscripted one went up
    remote.assert_all_replies_used()


def test_anthropic_and_a_tool_call_on_a_remote_tier(remote) -> None:
    remote.reply(match=r"weather in (\w+)",
                 tool_call={"name": "get_weather", "arguments": {"city": r"\1"}})
    msg = remote.anthropic(max_retries=0).messages.create(
        model="frontier", max_tokens=60,
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
        messages=[{"role": "user", "content": "the weather in Lyon?"}])
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("get_weather", {"city": "Lyon"})
    (call,) = remote.requests
    assert (call.protocol, call.tier, call.scripted) == ("messages", "standard", True)


def test_a_counted_fault_on_a_remote_tier_then_the_upstream_answers(remote, upstream) -> None:
    before = _upstream_requests(upstream)
    remote.fail("503", times=1)
    client = remote.openai(max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="frontier", messages=ASK)
    ok = client.chat.completions.create(model="frontier", messages=ASK)
    assert ok.choices[0].message.content
    assert _upstream_requests(upstream) == before + 1
    assert [c.scripted for c in remote.requests] == [False]


def test_a_remote_tiers_exchanges_go_to_the_tests_cassette(remote, tmp_path) -> None:
    path = remote.cassette(tmp_path / "remote.jsonl", "record")
    client = remote.openai(max_retries=0)
    live = client.chat.completions.create(model="frontier", messages=ASK)
    remote.cassette(path, "replay")
    again = client.chat.completions.create(model="frontier", messages=ASK)
    assert (again.id, again.choices[0].message.content) == (
        live.id, live.choices[0].message.content)
    assert len(remote.requests) == 2
