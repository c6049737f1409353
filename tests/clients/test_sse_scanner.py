"""The SSE stream parser: fast and slow paths agree, chunk boundaries, errors, tool calls."""

from __future__ import annotations

import orjson
import pytest

from fastmode.clients.sse_scanner import StreamParser

HEAD = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def ev(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(delta: dict, finish: str | None = None, **extra) -> bytes:
    return ev({**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
               **extra})


def stream(words: list[str], usage: dict | None = None) -> bytes:
    out = chunk({"role": "assistant", "content": ""})
    for w in words:
        out += chunk({"content": w})
    out += chunk({}, "stop")
    if usage:
        out += ev({**HEAD, "choices": [], "usage": usage})
    return out + b"data: [DONE]\n\n"


@pytest.mark.parametrize("strict", [False, True])
def test_whole_stream_in_one_chunk(strict):
    p = StreamParser(10.0, strict)
    body = stream(["Hel", "lo", ' "quoted" ', "\\n"], {"prompt_tokens": 5, "completion_tokens": 4})
    assert p.feed(body, 10.5) == 4
    p.close(10.6)
    assert p.events == 4 and p.ttft == pytest.approx(0.5)
    assert list(p.times) == [pytest.approx(0.5)] and list(p.counts) == [4]
    assert p.done and p.finish_reason == "stop"
    assert p.usage == {"prompt_tokens": 5, "completion_tokens": 4}
    assert p.outcome() == (None, None)


@pytest.mark.parametrize("strict", [False, True])
def test_byte_by_byte_gives_the_same_counts(strict):
    body = stream([f"w{i}" for i in range(20)])
    p = StreamParser(0.0, strict)
    total = 0
    for i in range(len(body)):
        total += p.feed(body[i : i + 1], float(i))
    p.close(float(len(body)))
    assert total == p.events == 20
    assert len(p.times) == 20 and all(n == 1 for n in p.counts)
    assert list(p.times) == sorted(p.times)
    assert p.outcome() == (None, None)


def test_role_chunk_and_empty_content_are_not_tokens():
    p = StreamParser(0.0)
    assert p.feed(chunk({"role": "assistant", "content": ""}), 1.0) == 0
    assert p.feed(chunk({"content": ""}), 1.5) == 0
    assert p.ttft is None
    assert p.feed(chunk({"content": "x"}), 2.0) == 1
    assert p.ttft == 2.0


def test_crlf_comments_event_lines_and_multiline_data():
    body = (b": keep-alive\r\n\r\n"
            b"event: message\r\ndata: " + orjson.dumps({**HEAD, "choices": [
                {"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}) + b"\r\n\r\n"
            b'data: {"choices": [{"index": 0,\r\ndata: "delta": {"content": "b"}}]}\r\n\r\n'
            b"data: [DONE]\r\n\r\n")
    p = StreamParser(0.0)
    n = p.feed(body[:37], 1.0) + p.feed(body[37:], 2.0)
    assert n == 2 and p.done and p.malformed is None


def test_tool_call_fragments_are_joined_by_index():
    p = StreamParser(0.0)
    body = chunk({"role": "assistant", "content": ""})
    body += chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "get_weather", "arguments": ""}}]})
    for frag in ['{"city"', ':"Paris"', "}"]:
        body += chunk({"tool_calls": [{"index": 0, "function": {"arguments": frag}}]})
    body += chunk({"tool_calls": [{"index": 1, "function": {"name": "other", "arguments": "{}"}}]})
    body += chunk({}, "tool_calls") + b"data: [DONE]\n\n"
    assert p.feed(body, 1.0) == 5
    assert p.tool_calls() == [("get_weather", '{"city":"Paris"}'), ("other", "{}")]
    assert p.finish_reason == "tool_calls"


def test_error_object_mid_stream():
    p = StreamParser(0.0)
    p.feed(chunk({"content": "a"}) + ev({"error": {"message": "engine died", "type": "x"}}), 1.0)
    p.close(1.0)
    assert p.outcome() == ("stream_error", "engine died")


@pytest.mark.parametrize("body", [
    b"data: {not json}\n\n",
    b"data: [1, 2]\n\n",
    b"hello world\n\n",
    b'data: {"choices": 3}\n\n',
    b'data: {"id": "x"}\n\n',
])
def test_malformed_streams(body):
    p = StreamParser(0.0)
    p.feed(chunk({"content": "a"}) + body + b"data: [DONE]\n\n", 1.0)
    p.close(1.0)
    assert p.outcome()[0] == "malformed"


def test_truncated_token_event_is_caught_in_strict_mode():
    body = chunk({"content": "abc"})[:-4] + b"}\n\n" + b"data: [DONE]\n\n"  # broken JSON
    lax, strict = StreamParser(0.0), StreamParser(0.0, strict=True)
    lax.feed(body, 1.0)
    strict.feed(body, 1.0)
    assert strict.outcome()[0] == "malformed"
    assert lax.events == 1  # the fast path only checks the shape (documented)


def test_stream_cut_before_done_is_a_disconnect():
    p = StreamParser(0.0)
    p.feed(chunk({"content": "a"}) + chunk({"content": "b"}), 1.0)
    p.close(1.0)
    assert p.outcome()[0] == "disconnect"
    # a finish_reason without [DONE] is accepted (some servers omit it)
    q = StreamParser(0.0)
    q.feed(chunk({"content": "a"}) + chunk({}, "length"), 1.0)
    q.close(1.0)
    assert q.outcome() == (None, None)


def test_last_event_without_blank_line_is_parsed_on_close():
    p = StreamParser(0.0)
    p.feed(chunk({"content": "a"}) + b"data: [DONE]", 1.0)
    assert not p.done
    p.close(2.0)
    assert p.done and p.outcome() == (None, None)


def test_reasoning_content_counts_as_output():
    p = StreamParser(0.0)
    assert p.feed(chunk({"reasoning_content": "hmm"}) + chunk({"content": "ok"}), 1.0) == 2
