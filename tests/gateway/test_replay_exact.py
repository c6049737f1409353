"""``fastmode replay-check`` checks what each protocol requires beyond the stream's shape (the
status, tool-call JSON and ``partial_json``, usage against the chunks, every stream's end), and
``serve --replay`` refuses a directory it rejects: each corruption is made by hand on a real
recording, and a varied recording (reasoning, tools, every protocol, whole and streamed)
passes untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from replay_session import (
    USER,
    WEATHER_ANTHROPIC,
    WEATHER_CHAT,
    post,
    recording_locally,
    steady,
)

from fastmode.cli import main
from fastmode.gateway.app import create_app
from fastmode.gateway.cassettes.library import CassetteError

THINK = [{"role": "user", "content": "Think it through: why is the sea salty?"}]
WEATHER_RESPONSES = {"type": "function", **WEATHER_CHAT["function"]}
ASKED: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"model": "frontier", "messages": USER, "max_tokens": 24,
                              "stream": True, "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"model": "frontier", "messages": THINK, "stream": True,
                              "max_completion_tokens": 200, "reasoning_effort": "low",
                              "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"model": "frontier", "messages": USER, "stream": True,
                              "max_tokens": 200, "tools": [WEATHER_CHAT],
                              "tool_choice": "required",
                              "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"model": "frontier", "messages": USER, "max_tokens": 200,
                              "tools": [WEATHER_CHAT], "tool_choice": "required"}),
    ("/v1/completions", {"model": "frontier", "prompt": "The sea", "max_tokens": 12,
                         "stream": True, "echo": True,
                         "stream_options": {"include_usage": True}}),
    ("/v1/responses", {"model": "frontier", "input": "Why is the sea salty?", "stream": True,
                       "max_output_tokens": 200, "reasoning": {"effort": "low"}}),
    ("/v1/responses", {"model": "frontier", "input": "Weather in Lyon?", "stream": True,
                       "max_output_tokens": 200, "tools": [WEATHER_RESPONSES],
                       "tool_choice": "required"}),
    ("/v1/messages", {"model": "frontier", "messages": THINK, "max_tokens": 3000,
                      "stream": True, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ("/v1/messages", {"model": "frontier", "messages": USER, "max_tokens": 200,
                      "stream": True, "tools": [WEATHER_ANTHROPIC],
                      "tool_choice": {"type": "any"}}),
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    import asyncio

    d = tmp_path_factory.mktemp("exact") / "c"

    async def record() -> None:
        async with recording_locally(d) as url:
            for path, body in ASKED:
                r = await post(url, path, body)
                assert r.status_code == 200, (path, r.text)

    asyncio.run(record())
    lines = next(d.glob("*.jsonl")).read_bytes().splitlines()
    assert len(lines) == len(ASKED)
    return [orjson.loads(x) for x in lines]


def check(tmp_path: Path, entries: list[dict[str, Any]], capsys: Any) -> tuple[int, str]:
    d = tmp_path / f"d{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    (d / "x.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries))
    code = main(["replay-check", str(d)])
    return code, capsys.readouterr().out


def test_a_varied_recording_passes(recorded, tmp_path, capsys) -> None:
    code, out = check(tmp_path, recorded, capsys)
    assert code == 0, out
    assert out.strip().endswith(": ok")


def data_events(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["data"] for e in entry["events"] if isinstance(e.get("data"), dict)]


def with_status(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "status": 500}


def chat_arguments_broken(entry: dict[str, Any]) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(entry))
    for data in data_events(out):
        for choice in data.get("choices") or ():
            for call in (choice.get("delta") or {}).get("tool_calls") or ():
                if call.get("function", {}).get("arguments"):
                    call["function"]["arguments"] = "{'city': Lyon"  # not JSON
                    return out
    raise AssertionError("no arguments delta")


def partial_json_broken(entry: dict[str, Any]) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(entry))
    deltas = [d["delta"] for d in data_events(out)
              if d.get("type") == "content_block_delta"
              and d["delta"].get("type") == "input_json_delta" and d["delta"]["partial_json"]]
    deltas[-1]["partial_json"] += "}}"  # one brace too many
    return out


def usage_changed(entry: dict[str, Any], how: Any) -> dict[str, Any]:
    out = orjson.loads(orjson.dumps(entry))
    for data in data_events(out):
        if isinstance(data.get("usage"), dict):
            data["usage"]["completion_tokens"] = how(data["usage"]["completion_tokens"])
    return out


def without_done(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "events": [e for e in entry["events"] if e.get("raw") != "[DONE]"]}


def test_each_corruption_is_caught_and_refused_by_serve_replay(recorded, tmp_path,
                                                               capsys) -> None:
    chat, _, tools, _, _, _, _, _, anthropic_tools = recorded
    events = sum(1 for d in data_events(chat) for c in d.get("choices") or ()
                 if (c.get("delta") or {}).get("content"))
    cases = [
        (with_status(chat), "status 500"),
        (chat_arguments_broken(tools), "arguments are not JSON"),
        (partial_json_broken(anthropic_tools), "input (partial_json) are not JSON"),
        (usage_changed(chat, lambda n: events - 1), f"{events - 1} output tokens for"),
        (usage_changed(chat, lambda n: 10 * n + 100), "more than the chunks carry"),
        (without_done(chat), "does not end with [DONE]"),
    ]
    for broken, what in cases:
        code, out = check(tmp_path, [broken], capsys)
        assert code == 1 and what in out, (what, out)
        d = tmp_path / f"d{len(list(tmp_path.iterdir())) - 1}"
        with pytest.raises(CassetteError, match="replay-check"):
            create_app(steady(replay={"dir": str(d)}))
