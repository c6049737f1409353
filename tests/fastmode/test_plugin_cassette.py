"""``fastmode.cassette``: a test's exchanges recorded to a file, then replayed from it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import anthropic
import openai
import pytest

ASK = [{"role": "user", "content": "Tell me about Lyon."}]


def _exchanges(fastmode) -> tuple[openai.OpenAI, anthropic.Anthropic]:
    return fastmode.openai(max_retries=0), fastmode.anthropic(max_retries=0)


def test_openai_and_anthropic_exchanges_are_recorded_then_replayed(fastmode, tmp_path) -> None:
    path = fastmode.cassette(tmp_path / "lyon.jsonl", "record")
    oa, an = _exchanges(fastmode)
    chat = oa.chat.completions.create(model="frontier-spark", messages=ASK)
    chunks = list(oa.chat.completions.create(model="frontier-spark", messages=ASK, stream=True))
    msg = an.messages.create(model="frontier", max_tokens=40, messages=ASK)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(e["protocol"], e["stream"]) for e in lines] == [
        ("chat", False), ("chat", True), ("messages", False)]
    assert all("x-fastmode-test-id" not in e["headers"] for e in lines)

    fastmode.cassette(path, "replay")
    raw = oa.chat.completions.with_raw_response.create(model="frontier-spark", messages=ASK)
    again = raw.parse()
    assert raw.headers["x-fastmode-cassette"] == f"{path.name}:1"
    assert (again.id, again.choices[0].message.content) == (
        chat.id, chat.choices[0].message.content)
    replayed = list(oa.chat.completions.create(model="frontier-spark", messages=ASK,
                                               stream=True))
    assert [c.model_dump() for c in replayed] == [c.model_dump() for c in chunks]
    msg2 = an.messages.create(model="frontier", max_tokens=40, messages=ASK)
    assert (msg2.id, msg2.content[0].text) == (msg.id, msg.content[0].text)
    assert len(fastmode.requests) == 6  # the journal has the replayed ones too
    assert fastmode.cassette_misses == []


def test_a_request_the_cassette_does_not_hold_is_a_404_in_each_routes_format(
        fastmode, tmp_path) -> None:
    path = fastmode.cassette(tmp_path / "one.jsonl", "record")
    oa, an = _exchanges(fastmode)
    oa.chat.completions.create(model="frontier-spark", messages=ASK)
    fastmode.cassette(path, "replay")
    other = [{"role": "user", "content": "Tell me about Paris."}]
    with pytest.raises(openai.NotFoundError) as oerr:
        oa.chat.completions.create(model="frontier-spark", messages=other)
    assert oerr.value.code == "cassette_miss"
    assert "differs at messages[0].content" in oerr.value.message
    with pytest.raises(anthropic.NotFoundError) as aerr:
        an.messages.create(model="frontier", max_tokens=40, messages=other)
    body = aerr.value.body
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert "no messages exchange" in body["error"]["message"]
    assert len(fastmode.cassette_misses) == 2


def test_once_records_then_replays_and_new_episodes_appends(fastmode, tmp_path) -> None:
    path = tmp_path / "once.jsonl"
    fastmode.cassette(path, "once")  # no file yet: records
    oa, _ = _exchanges(fastmode)
    first = oa.chat.completions.create(model="frontier-spark", messages=ASK)
    fastmode.cassette(path, "once")  # the file holds it: replays
    assert oa.chat.completions.create(model="frontier-spark", messages=ASK).id == first.id
    fastmode.cassette(path, "new_episodes")
    other = [{"role": "user", "content": "And Paris?"}]
    new = oa.chat.completions.create(model="frontier-spark", messages=other)
    assert oa.chat.completions.create(model="frontier-spark", messages=ASK).id == first.id
    assert len(path.read_text().splitlines()) == 2
    fastmode.cassette(path, "replay")
    assert oa.chat.completions.create(model="frontier-spark", messages=other).id == new.id


def test_bad_cassettes_are_refused(fastmode, tmp_path) -> None:
    with pytest.raises(ValueError, match="no recorded exchange to replay"):
        fastmode.cassette(tmp_path / "none.jsonl", "replay")
    with pytest.raises(ValueError, match="mode"):
        fastmode.cassette(tmp_path / "x.jsonl", "sometimes")
    with pytest.raises(ValueError, match="expected a .jsonl file"):
        fastmode.cassette(tmp_path, "record")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    with pytest.raises(ValueError, match="broken.jsonl:1: not JSON"):
        fastmode.cassette(broken, "replay")


def test_a_swallowed_miss_still_fails_the_test(tmp_path: Path) -> None:
    """Code under test that catches the 404: the fixture's end fails the test, saying why."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent('''
        import openai

        def test_record(fastmode):
            fastmode.cassette("c.jsonl", "record")
            fastmode.openai().chat.completions.create(
                model="frontier-spark", messages=[{"role": "user", "content": "hi"}])

        def test_swallow(fastmode):
            fastmode.cassette("c.jsonl", "replay")
            try:
                fastmode.openai(max_retries=0).chat.completions.create(
                    model="frontier-spark", messages=[{"role": "user", "content": "bye"}])
            except openai.NotFoundError:
                pass
    '''))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:randomly", str(tmp_path / "test_inner.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 passed, 1 error" in out.stdout, out.stdout  # (the call passed, its end not)
    assert "fastmode cassette: 1 request(s) not in the cassette: No recorded exchange in" \
        in out.stdout
    assert (tmp_path / "c.jsonl").is_file()
