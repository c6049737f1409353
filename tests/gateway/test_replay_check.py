"""Cassettes as files (fastmode/gateway/observe/exchange_format.py, streams.py, check.py): ``fastmode
replay-check`` finds what is wrong with each line, a directory with a bad line is refused at
start, a hand-edited cassette replays what it says, and the replay stream hands events out at
their recorded times on a virtual clock."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from replay_session import CHAT_STREAM, post, recording_locally, replaying, sse_data, steady

from fastmode.cli import main
from fastmode.gateway.app import create_app
from fastmode.gateway.cassettes.library import CassetteError
from fastmode.gateway.cassettes.replay_stream import ReplayStream


def test_the_replay_stream_hands_each_event_out_at_its_time_on_a_virtual_clock() -> None:
    now = [100.0]
    stream = ReplayStream([0.0, 0.5, 0.5, 2.0], [0, 1, 1, 0], arrival=100.0,
                          clock=lambda: now[0])
    assert stream.take() == 1 and stream.seq.first_token_at < 0  # no content yet
    now[0] = 100.4
    assert stream.take() == 0
    now[0] = 100.5
    assert stream.take() == 2 and stream.seq.first_token_at == 100.5
    assert stream.produced() == 2 and stream.since == 100.5
    now[0] = 101.9
    assert stream.take() == 0 and stream.seq.state != "finished"
    now[0] = 102.0
    assert stream.take() == 1 and stream.seq.finished_at == 102.0
    assert [stream.token_at(k) for k in range(4)] == [100.0, 100.5, 100.5, 102.0]
    assert stream.take() == 0 and stream.ready() is None
    at_once = ReplayStream([0.0, 0.5, 2.0], [0, 1, 0], 7.0, clock=lambda: 7.0, delay=False)
    assert at_once.take() == 3 and at_once.last_at == 7.0


async def test_a_cancelled_replay_stops_waiting_at_once() -> None:
    loop = asyncio.get_running_loop()
    stream = ReplayStream([0.0, 3600.0], [1, 1], loop.time(), loop.time)
    assert stream.take() == 1
    waiter = stream.ready()
    assert waiter is not None
    stream.cancel()
    await asyncio.wait_for(waiter, 1)  # woken by the cancel, not after an hour
    assert stream.take() == 0 and stream.ready() is None and stream.produced() == 1


async def test_replay_check_accepts_a_recording_and_lists_every_problem(tmp_path, capsys) -> None:
    d = tmp_path / "c"
    async with recording_locally(d) as url:
        for path, body in (("/v1/chat/completions", CHAT_STREAM),
                           ("/v1/responses", {"model": "frontier", "input": "hi",
                                              "stream": True}),
                           ("/v1/messages", {"model": "frontier", "max_tokens": 9,
                                             "stream": True, "messages": [
                                                 {"role": "user", "content": "hi"}]})):
            await post(url, path, body)
    assert main(["replay-check", str(d)]) == 0
    assert capsys.readouterr().out.strip() == "3 exchange(s) in 1 cassette file(s): ok"

    chat, responses, messages = [orjson.loads(x) for x in next(d.glob("*.jsonl")).read_bytes()
                                 .splitlines()]
    broken = [
        b"{not json",
        orjson.dumps({**chat, "version": 2}),
        orjson.dumps({**chat, "events": chat["events"][:-1]}),  # no [DONE]
        orjson.dumps({**responses, "events": responses["events"][:3] + responses["events"][4:]}),
        orjson.dumps({**messages, "events": [e for e in messages["events"]
                                             if e["event"] != "content_block_start"]}),
        orjson.dumps({**chat, "requets": {}}),  # a typo'd key
        orjson.dumps({**chat, "request": {"messages": []}}),  # no model
    ]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.jsonl").write_bytes(b"\n".join(broken) + b"\n")
    assert main(["replay-check", str(tmp_path / "bad")]) == 1
    out = capsys.readouterr().out
    for line, what in ((1, "not JSON"), (2, "format version 2"),
                       (3, "does not end with [DONE]"), (4, "sequence_number 4, expected 3"),
                       (5, "a delta of block 0, which is not open"), (6, "requets"),
                       (7, "request: Missing required parameter: 'model'")):
        assert f"x.jsonl:{line}: " in out and what in out, (line, what, out)
    assert out.splitlines()[-1] == "7 exchange(s) in 1 cassette file(s): 8 problem(s)"
    with pytest.raises(CassetteError, match=r"x\.jsonl:1: not JSON"):
        create_app(steady(replay={"dir": str(tmp_path / "bad")}))


async def test_a_hand_edited_cassette_replays_what_it_says(tmp_path) -> None:
    d = tmp_path / "c"
    async with recording_locally(d) as url:
        await post(url, "/v1/chat/completions", CHAT_STREAM)
    path = next(d.glob("*.jsonl"))
    entry = orjson.loads(path.read_bytes())
    for event in entry["events"]:
        data = event.get("data")
        if isinstance(data, dict) and data.get("choices") and data["choices"][0]["delta"].get(
                "content"):
            data["choices"][0]["delta"]["content"] = "edited "
    path.write_bytes(orjson.dumps(entry) + b"\n")
    for timing in ("none", "tier:fast"):  # the recorded bytes, and the content re-rendered
        async with replaying(d, timing=timing) as (url, _):
            chunks = sse_data((await post(url, "/v1/chat/completions", CHAT_STREAM)).content)
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                       if c["choices"])
        assert set(text.split()) == {"edited"}, timing


def test_serve_flags_are_checked_before_anything_starts(tmp_path, capsys) -> None:
    d = str(tmp_path)
    assert main(["serve", "--record", d, "--replay", d]) == 2
    assert "--record and --replay: one at a time" in capsys.readouterr().err
    assert main(["serve", "--replay", d, "--replay-timing", "tier:nope"]) == 2
    assert "unknown tier 'nope'" in capsys.readouterr().err
    assert main(["serve", "--replay", d, "--replay-timing", "sometimes"]) == 2
    assert "expected recorded, none, modeled or tier:NAME" in capsys.readouterr().err


def test_upstream_flag_serves_every_tier_remotely(tmp_path) -> None:
    from fastmode.cli import build_parser
    from fastmode.cli._cassettes import apply
    from fastmode.gateway.config import load_config

    args = build_parser().parse_args(["serve", "--upstream", "http://127.0.0.1:9/",
                                      "--record", str(tmp_path)])
    config = apply(args, load_config())
    assert set(config.remote.tiers) == set(config.tiers)
    assert config.remote.tiers["fast"].upstreams == ["http://127.0.0.1:9"]
    assert config.record.dir == str(tmp_path)
