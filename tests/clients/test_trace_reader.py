"""The JSONL trace reader: good traces, and bad lines named by their line number."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fastmode.cli import main
from fastmode.clients.trace_reader import TraceError, read_trace
from fastmode.clients.workload import BENCH_TOOLS, CHAT_FRAMING_TOKENS, TOOL_MIN_MAX_TOKENS

TIERS = ("standard", "fast", "spark")


def write(tmp_path: Path, *lines: str | dict) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else orjson.dumps(x).decode()
                              for x in lines) + "\n")
    return path


def test_reads_messages_prompt_lengths_tiers_and_tools(tmp_path):
    path = write(
        tmp_path,
        "# a comment, then a blank line",
        "",
        {"offset": 1.5, "prompt_tokens": 50, "max_tokens": 20, "tier": "fast"},
        {"offset": 0.25, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
        {"arrival": 2, "prompt_tokens": 30, "max_tokens": 8, "tier": "spark",
         "tools": BENCH_TOOLS},
    )
    specs = read_trace(path, TIERS)
    assert [s.offset for s in specs] == [0.25, 1.5, 2]  # sorted by offset
    first, second, third = specs
    assert first.tier == "standard" and first.messages[0]["content"] == "hi"
    assert first.max_tokens == 5 and first.ignore_eos and first.tools is None
    assert second.tier == "fast" and second.prompt_tokens == 50
    words = second.messages[0]["content"].split()
    assert len(words) == 50 - CHAT_FRAMING_TOKENS
    assert all(len(w) <= 6 and w.isalpha() for w in words)
    assert third.tools == BENCH_TOOLS and not third.ignore_eos
    assert third.max_tokens == TOOL_MIN_MAX_TOKENS
    assert third.extra == {"tool_choice": "required"}


def test_closed_loop_traces_may_leave_offsets_out(tmp_path):
    path = write(tmp_path, {"prompt_tokens": 10, "max_tokens": 3},
                 {"prompt_tokens": 12, "max_tokens": 4})
    specs = read_trace(path, TIERS, need_offset=False)
    assert [s.max_tokens for s in specs] == [3, 4]
    with pytest.raises(TraceError, match=r"line 1: offset: missing"):
        read_trace(path, TIERS, need_offset=True)


GOOD = '{"offset": 0, "prompt_tokens": 10, "max_tokens": 5}'


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"offset": 0, "prompt_tokens": 10, "max_tokens": 5', "not valid JSON"),
        ("[1, 2, 3]", "expected a JSON object, got list"),
        ('{"offset": 0, "prompt_tokens": 10}', "max_tokens: missing"),
        ('{"offset": 0, "prompt_tokens": 10, "max_tokens": 0}', "max_tokens: must be a positive"),
        ('{"offset": 0, "prompt_tokens": 10, "max_tokens": 2.5}', "max_tokens: must be a positive"),
        ('{"offset": 0, "prompt_tokens": 10, "max_tokens": true}', "max_tokens: must be a positive"),
        ('{"offset": -1, "prompt_tokens": 10, "max_tokens": 5}', "offset: must be a number >= 0"),
        ('{"offset": "soon", "prompt_tokens": 10, "max_tokens": 5}', "offset: must be a number"),
        ('{"offset": 0, "max_tokens": 5}', "messages / prompt_tokens: give exactly one"),
        ('{"offset": 0, "prompt_tokens": 10, "messages": [{"role": "user"}], "max_tokens": 5}',
         "messages / prompt_tokens: give exactly one"),
        ('{"offset": 0, "messages": [], "max_tokens": 5}', "messages: must be a non-empty list"),
        ('{"offset": 0, "messages": ["hi"], "max_tokens": 5}', r"messages\[0\]: must be an object"),
        ('{"offset": 0, "prompt_tokens": -3, "max_tokens": 5}', "prompt_tokens: must be a positive"),
        ('{"offset": 0, "prompt_tokens": 10, "max_tokens": 5, "tier": "turbo"}',
         "tier: unknown 'turbo'; known: fast, spark, standard"),
        ('{"offset": 0, "prompt_tokens": 10, "max_tokens": 5, "tools": {}}', "tools: must be a list"),
        ('{"offset": 0, "prompt_tokens": 10, "max_tokens": 5, "temprature": 1}',
         "unknown field 'temprature'"),
    ],
)
def test_bad_line_names_its_line_number(tmp_path, bad, message):
    path = write(tmp_path, GOOD, "# comment", GOOD, bad, GOOD)
    with pytest.raises(TraceError, match=rf"trace\.jsonl line 4: {message}"):
        read_trace(path, TIERS)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "nope.jsonl", TIERS)
    with pytest.raises(TraceError, match="no requests"):
        read_trace(write(tmp_path, "# only a comment"), TIERS)


def test_bench_command_reports_a_bad_trace_line_and_exits_2(tmp_path, capsys):
    path = write(tmp_path, GOOD, '{"offset": 1, "prompt_tokens": 10, "max_tokens": "many"}')
    code = main(["bench", "--trace", str(path), "--url", "http://127.0.0.1:9", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "fastmode bench: error:" in err and "line 2: max_tokens" in err
    assert "Traceback" not in err
