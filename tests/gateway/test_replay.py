"""Record and replay (fastmode/gateway/cassettes/, docs/replay.md): a session recorded through a remote
tier from a fastmode engine replays byte for byte over every protocol and transport, with the
recorded timing or none; with a tier's modeled timing it says the same on that tier's clock and
prices. Timing is checked on modeled timestamps (the streams' own times), never the wall clock.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import orjson
import pytest
from conftest import ROOT
from replay_session import (
    CHAT_STREAM,
    SESSION,
    post,
    recording,
    replaying,
    run_session,
    sse_data,
    websocket,
)

from fastmode.backends.pricing import operating_step_seconds
from fastmode.gateway.cassettes.check import check
from fastmode.gateway.observe.exchange_format import read


@pytest.fixture
async def session(tmp_path: Path) -> tuple[Path, dict]:
    """The session recorded: (cassette directory, what the client received, by exchange)."""
    directory = tmp_path / "cassettes"
    async with recording(directory) as url:
        seen = await run_session(url)
    return directory, seen


@pytest.mark.parametrize("timing", ["recorded", "none"])
async def test_every_protocol_and_transport_replays_byte_for_byte(session, timing) -> None:
    directory, seen = session
    async with replaying(directory, timing=timing) as (url, _):
        replayed = await run_session(url)
    for name in SESSION:
        assert replayed[name] == seen[name], name


async def test_the_cassette_holds_every_exchange_as_events(session) -> None:
    directory, seen = session
    entries = [line.entry for line in read(directory)]
    assert all(e is not None for e in entries)
    kinds = {(e.protocol, e.stream, e.transport, e.fast) for e in entries}
    assert kinds == {("chat", False, "http", False), ("chat", True, "sse", False),
                     ("chat", True, "sse", True), ("completions", False, "http", False),
                     ("completions", True, "sse", False), ("responses", False, "http", False),
                     ("responses", True, "sse", False), ("responses", True, "websocket", False),
                     ("messages", False, "http", False), ("messages", True, "sse", False)}
    assert len(entries) == len(SESSION) + 2  # two turns in each of the continued ones
    chat = next(e for e in entries if e.protocol == "chat" and e.stream and not e.fast)
    assert chat.events[-1].raw == "[DONE]" and "stream" not in chat.request
    assert chat.recorded["tier"] == "standard" and chat.recorded["upstream"].startswith("http")
    times = [e.t for e in chat.events]
    assert times == sorted(times) and times[-1] > 0
    # one event per item (not per byte): the SSE framing is the protocol's, rebuilt on replay
    assert len(chat.events) == seen["chat-stream"].count(b"\n\n")


def test_every_recorded_stream_is_well_formed_for_its_protocol(session) -> None:
    """``replay-check`` on what the gateway sent through a remote tier (it found that a
    Completions stream from a remote tier had no ``finish_reason``: its last token is not known
    when its chunk is encoded; the reason now has a chunk of its own)."""
    directory, _ = session
    report = check(directory)
    assert report.problems == [] and report.entries == len(SESSION) + 2


async def test_a_recording_over_sse_replays_over_the_websocket_and_back(session) -> None:
    directory, seen = session
    frames = []
    async with replaying(directory) as (url, _):
        # recorded over SSE, asked over the websocket: the same events, one frame each
        frames = await websocket(url, [{"model": "frontier", "input": "Hello there",
                                        "max_output_tokens": 24}])
        # recorded over the websocket, asked over SSE
        r = await post(url, "/v1/responses", {"model": "frontier", "input": "Say hi.",
                                              "max_output_tokens": 16, "stream": True})
    assert [orjson.loads(f) for f in frames] == sse_data(seen["responses-stream"])
    ws_first = seen["responses-websocket"][:len(sse_data(r.content))]
    assert [orjson.loads(f) for f in ws_first] == sse_data(r.content)


def _agent_loop():
    spec = importlib.util.spec_from_file_location("agent_loop", ROOT / "examples/agent_loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_an_agent_loop_with_tool_calls_replays_at_each_timing(tmp_path) -> None:
    """The README's loop, with the official SDK: recorded, then replayed with the recorded
    timing and with fast mode's — the same tool calls (ids included) and the same answer."""
    import asyncio

    loop = _agent_loop()
    directory = tmp_path / "cassettes"
    async with recording(directory) as url:
        recorded = await asyncio.to_thread(loop.run, url + "/v1")
    assert recorded[0].startswith("get_weather(") and recorded[-1].startswith("answer: ")
    assert len(recorded) >= 2
    for timing in ("recorded", "tier:fast"):
        async with replaying(directory, timing=timing) as (url, _):
            assert await asyncio.to_thread(loop.run, url + "/v1") == recorded, timing


def settled(gateway, monkeypatch) -> list:
    """The jobs ``gateway`` settles from now on."""
    jobs = []
    settle = gateway.settle

    def keep(job, *args, **kwargs):
        jobs.append(job)
        return settle(job, *args, **kwargs)

    monkeypatch.setattr(gateway, "settle", keep)
    return jobs


async def test_recorded_timing_is_each_events_recorded_time(session, monkeypatch) -> None:
    """The replayed stream's modeled times are the recorded offsets from the request's
    arrival, event for event (and all at the arrival with timing none)."""
    directory, _ = session
    entry = next(line.entry for line in read(directory)
                 if line.entry.protocol == "messages" and line.entry.stream
                 and "tools" not in line.entry.request)
    offsets = [e.t for e in entry.events]
    for timing in ("recorded", "none"):
        async with replaying(directory, timing=timing) as (url, app):
            jobs = settled(app.state.gateway, monkeypatch)
            await SESSION["messages-stream"](url)
        (job,) = jobs
        stream = job.stream
        times = [stream.token_at(k) - stream.seq.arrival for k in range(len(offsets))]
        expect = offsets if timing == "recorded" else [0.0] * len(offsets)
        assert times == pytest.approx(expect, abs=1e-9)
        first = next(i for i, e in enumerate(entry.events)
                     if e.data.get("type") == "content_block_delta")
        info = job.time_info()
        assert info["prompt_time"] == pytest.approx(expect[first], abs=1e-9)
        assert info["total_time"] == pytest.approx(expect[-1], abs=1e-9)
        assert job.ended == "completed" and job.billed_output == entry.events[-2].data[
            "usage"]["output_tokens"]


async def test_modeled_timing_is_the_tiers_speed_and_price(session) -> None:
    """``tier:NAME``: the recorded reply paced by that tier's engine — one decode step per
    token at the tier's modeled operating point — and priced at its prices. Everything else is
    the recording's: the text, the ids, the creation time."""
    directory, seen = session
    recorded = sse_data(seen["chat-stream"])
    out = recorded[-1]["usage"]["completion_tokens"]
    itl = {}
    for tier in ("fast", "standard"):
        async with replaying(directory, timing=f"tier:{tier}") as (url, app):
            r = await post(url, "/v1/chat/completions", CHAT_STREAM)
            served = app.state.gateway.spec.tiers[tier]
        assert r.headers["x-fastmode-tier"] == tier
        chunks = sse_data(r.content)
        assert _envelope(chunks) == _envelope(recorded)  # the tier's own fields aside
        usage = chunks[-1]["usage"]
        assert usage["completion_tokens"] == out
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        assert usage["cost_usd"] == pytest.approx(
            served.prices.cost(usage["prompt_tokens"], cached, out))
        (info,) = [c["time_info"] for c in chunks if c.get("time_info")]
        # the model's pace: a busy host's slips (completion_host_lag_time) are not the tier's
        itl[tier] = (info["completion_time"] - info["completion_host_lag_time"]) / (out - 1)
        dep = served.deployment
        assert itl[tier] == pytest.approx(operating_step_seconds(dep.placement, dep.background),
                                          rel=0.1)
    assert itl["fast"] < itl["standard"] / 2


async def test_a_modeled_replay_differs_only_in_what_belongs_to_the_tier(session) -> None:
    """Replayed on the tier it was recorded on (``tier:standard``), every protocol and transport
    says what was recorded — ids, text, tool calls, events, sequence numbers — and differs only
    in the tier's clock (``time_info``) and its usage (the replaying engine's prefix cache)."""
    directory, seen = session
    async with replaying(directory, timing="tier:standard") as (url, _):
        modeled = await run_session(url)
    for name in SESSION:
        was, now = _parsed(seen[name]), _parsed(modeled[name])
        if name == "completions-stream":  # a remote reply's reason has a chunk of its own
            assert _text(was) == _text(now) and _reasons(was) == _reasons(now)
            assert len(_reasons(was)) == 1
            continue
        assert _untimed(was) == _untimed(now), name


def _parsed(raw) -> list:
    if isinstance(raw, list):  # websocket frames
        return [orjson.loads(f) for f in raw]
    if not raw.startswith((b"data:", b"event:")):
        return [orjson.loads(raw)]
    return [orjson.loads(line[6:]) if line.startswith(b"data: {") else line[6:]
            for line in raw.split(b"\n") if line.startswith(b"data: ")]


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in ("time_info", "usage")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _text(chunks: list) -> str:
    return "".join(c["choices"][0]["text"] for c in chunks if isinstance(c, dict)
                   and c.get("choices"))


def _reasons(chunks: list) -> list:
    return [c["choices"][0]["finish_reason"] for c in chunks if isinstance(c, dict)
            and c.get("choices") and c["choices"][0]["finish_reason"]]


def _envelope(chunks: list[dict]) -> list[dict]:
    """Chunks without what belongs to the serving tier (its clock, its usage and price)."""
    return [{k: v for k, v in c.items() if k not in ("time_info", "usage")} for c in chunks]
