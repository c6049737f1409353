"""Replies in aider's edit formats (``backends.mockmodel.edit_formats``): the format is read
from the system prompt, and the reply's edit block, applied the way the format says, turns the
file into the one the task asked for. The requests are aider 0.86.2's own, recorded against
``fastmode serve --record`` (tests/data/aider/: ``--edit-format whole|diff|udiff``, the task
"change the first line of README.md to Hello fastmode" on a three-line README.md)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from fastmode.backends.mockmodel import GenerationRequest, generate
from fastmode.backends.mockmodel.chat_files import FILES_MARKER, ChatFile
from fastmode.backends.mockmodel.edit_formats import asked_format, edit_format_reply, render
from fastmode.backends.mockmodel.edits import requested_edit
from fastmode.backends.mockmodel.streams import Streams
from fastmode.backends.tokenizer import count_tokens

DATA = Path(__file__).resolve().parents[1] / "data" / "aider"
README = "first line\nsecond line\nthird line\n"
FORMATS = ("whole", "diff", "udiff")


def recorded(fmt: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / f"{fmt}.json").read_text())
    return body


def request(body: dict[str, Any], **changes: Any) -> GenerationRequest:
    return GenerationRequest(messages=body["messages"], temperature=0.0,
                             model=body["model"], **changes)


def apply(fmt: str, reply: str, path: str, text: str) -> str:
    """The file after ``reply`` is applied as format ``fmt`` says (read independently of the
    code under test: the format's own rules)."""
    if fmt == "whole":
        m = re.search(rf"^{re.escape(path)}\n(`{{3,}})\n(.*?)^\1$", reply, re.M | re.S)
        assert m is not None, reply
        return m.group(2)
    if fmt == "diff":
        m = re.search(r"^<{7} SEARCH\n(.*?)^={7}\n(.*?)^>{7} REPLACE$", reply, re.M | re.S)
        assert m is not None, reply
        assert text.count(m.group(1)) == 1
        return text.replace(m.group(1), m.group(2), 1)
    m = re.search(rf"^```diff\n--- a/{re.escape(path)}\n\+\+\+ b/{re.escape(path)}\n"
                  r"@@ \.\.\. @@\n(.*?)^```$", reply, re.M | re.S)
    assert m is not None, reply
    lines = m.group(1).splitlines(keepends=True)
    before = "".join(line[1:] for line in lines if line[0] in " -")
    after = "".join(line[1:] for line in lines if line[0] in " +")
    assert text.count(before) == 1
    return text.replace(before, after, 1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_recorded_aider_request_gets_its_edit_in_its_format(fmt: str) -> None:
    body = recorded(fmt)
    fmt_asked = asked_format(body["messages"])
    assert fmt_asked is not None and fmt_asked.name == fmt
    gen = generate(request(body))
    assert gen.finish_reason == "stop" and not gen.tool_calls
    assert gen.output_tokens == count_tokens(gen.text)  # pieces are the tokenizer's tokens
    preface = gen.text.split("\n", 1)[0]
    assert "README.md" in preface and preface.endswith(".")
    assert apply(fmt, gen.text, "README.md", README) == README.replace(
        "first line", "Hello fastmode")


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_reply_is_the_same_for_the_same_request(fmt: str) -> None:
    body = recorded(fmt)
    assert generate(request(body)).text == generate(request(body)).text


def test_max_tokens_cuts_the_edit_reply() -> None:
    gen = generate(request(recorded("diff"), max_tokens=5))
    assert gen.finish_reason == "length" and gen.output_tokens == 5


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_task_it_cannot_read_gets_the_ordinary_reply(fmt: str) -> None:
    body = copy.deepcopy(recorded(fmt))
    body["messages"][-1]["content"] = "what is this project about?"
    assert edit_format_reply(request(body), Streams(request(body))) is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_change_it_cannot_place_is_a_question_not_a_block(fmt: str) -> None:
    body = copy.deepcopy(recorded(fmt))
    body["messages"][-1]["content"] = "replace the word zebra with horse"  # no zebra in it
    reply = edit_format_reply(request(body), Streams(request(body)))
    assert reply is not None and reply.text.endswith("?") and "```" not in reply.text


def test_no_edit_format_asked_for_means_no_edit_reply() -> None:
    body = copy.deepcopy(recorded("whole"))
    body["messages"][0]["content"] = "You are a helpful assistant."
    assert edit_format_reply(request(body), Streams(request(body))) is None


def test_a_reminder_in_a_trailing_system_message_still_gets_the_edit() -> None:
    """aider sends some models its reminder as a last system message, not in the task."""
    body = copy.deepcopy(recorded("udiff"))
    task = body["messages"][-1]["content"].split("\n\n", 1)[0]
    body["messages"][-1]["content"] = task
    body["messages"].append({"role": "system", "content": body["messages"][0]["content"]})
    gen = generate(request(body))
    assert apply("udiff", gen.text, "README.md", README).startswith("Hello fastmode\n")


def _chat(fmt_marker: str, files: str, task: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": f"Rules: use the {fmt_marker} format."},
            {"role": "user", "content": f"I have {FILES_MARKER}.\n{files}"},
            {"role": "assistant", "content": "Ok."},
            {"role": "user", "content": task}]


@pytest.mark.parametrize(("marker", "fmt"), [
    ("*file listing*", "whole"), ("*SEARCH/REPLACE block*", "diff"), ("`diff -U0`", "udiff")])
@pytest.mark.parametrize("task", [
    "rename helper to assist in src/app.py", "append 'print(3)' to src/app.py",
    "delete the line containing print(2)", "fix the typo helpr -> helper"])
def test_the_named_file_is_edited_in_each_format(marker: str, fmt: str, task: str) -> None:
    app = "def helper():\n    print(1)\n\nhelpr = helper\nprint(2)\n"
    files = f"\nREADME.md\n```\nhelper docs\n```\n\nsrc/app.py\n```\n{app}```\n"
    messages = _chat(marker, files, task)
    gen = generate(GenerationRequest(messages=messages, seed=1))
    expected = requested_edit(task, app, "src/app.py")
    assert expected is not None
    assert apply(fmt, gen.text, "src/app.py", app) == expected.text


def test_a_whole_listing_uses_the_fence_the_files_came_in() -> None:
    file = ChatFile("a.md", "```\nx\n```\n", ("````", "````"))
    edit = requested_edit("append y", file.text)
    assert edit is not None
    reply = render("whole", file, edit, "I will add a line.")
    assert apply("whole", reply, "a.md", file.text) == "```\nx\n```\ny\n"
