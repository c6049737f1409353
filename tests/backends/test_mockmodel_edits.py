"""The edit a plain-language task asks for (``backends.mockmodel.edits``) and the files a
text-editing agent put in the chat (``chat_files``): each phrasing, literal quoting, the span of
whole lines an edit block carries, and tasks that ask for nothing this file can take."""

from __future__ import annotations

import pytest

from fastmode.backends.mockmodel.chat_files import FILES_MARKER, chat_files
from fastmode.backends.mockmodel.edits import requested_edit

TEXT = "first line\nsecond line\nthird line\n"


@pytest.mark.parametrize(("task", "expected"), [
    ("change the first line of README.md to Hello fastmode",
     "Hello fastmode\nsecond line\nthird line\n"),
    ("Replace the last line with: the end.", "first line\nsecond line\nthe end\n"),
    ("Please change line 2 to `two.`", "first line\ntwo.\nthird line\n"),
    ("replace second with 2nd in README.md", "first line\n2nd line\nthird line\n"),
    ("replace 'third line' with \"3rd line\"", "first line\nsecond line\n3rd line\n"),
    ("change second to 2nd", "first line\n2nd line\nthird line\n"),
    ("rename line to row", "first row\nsecond row\nthird row\n"),
    ("add a line Goodbye to the end of README.md", TEXT + "Goodbye\n"),
    ("append 'x = 1'", TEXT + "x = 1\n"),
    ("add the line 'top!' at the top of README.md", "top!\n" + TEXT),
    ("delete the line containing second", "first line\nthird line\n"),
    ("remove all lines containing 'ir'", "second line\n"),
    ("delete the last line", "first line\nsecond line\n"),
    ("fix the typo second -> 2nd", "first line\n2nd line\nthird line\n"),
    ("Fix the typo in README.md: 'thrid' should be 'third'", None),
])
def test_each_phrasing_gives_the_new_file(task: str, expected: str | None) -> None:
    edit = requested_edit(task, TEXT, "README.md")
    if expected is None:
        assert edit is None
        return
    assert edit is not None
    assert edit.text == expected
    # the edit's span is whole lines of the old file, and putting ``new`` there gives the file
    assert TEXT[edit.start:edit.start + len(edit.old)] == edit.old
    assert TEXT[:edit.start] + edit.new + TEXT[edit.start + len(edit.old):] == expected
    assert edit.start == 0 or TEXT[edit.start - 1] == "\n"


def test_a_typo_is_fixed_as_a_whole_word_only() -> None:
    edit = requested_edit("fix the typo teh -> the", "teh tehran\n")
    assert edit is not None and edit.text == "the tehran\n"


def test_quoted_text_is_taken_literally() -> None:
    text = "greeting = 'hi'\n"
    edit = requested_edit("replace \"'hi'\" with \"'hello' in x.py\"", text, "x.py")
    assert edit is not None and edit.text == "greeting = 'hello' in x.py\n"


def test_the_span_grows_until_it_occurs_once() -> None:
    text = "a\nb\na\nb\n"
    edit = requested_edit("remove the line containing b", text)
    assert edit is not None and edit.text == "a\na\nb\n"
    assert text.count(edit.old) == 1 and edit.old.strip()


def test_appending_to_a_file_keeps_a_line_of_context() -> None:
    edit = requested_edit("append done", "one\n\n")
    assert edit is not None and edit.text == "one\n\ndone\n"
    assert edit.old.strip()  # an empty SEARCH block would mean "a new file" to an agent
    empty = requested_edit("append done", "")
    assert empty is not None and (empty.old, empty.new) == ("", "done\n")


@pytest.mark.parametrize("task", [
    "add a docstring to f()",  # no line to add
    "change the greeting to be casual",  # "the greeting" is not in the file
    "change the ninth line to x",  # no such line
    "replace fourth with 4th",
    "what does this file do?",
])
def test_tasks_this_file_cannot_take_give_no_edit(task: str) -> None:
    assert requested_edit(task, TEXT, "README.md") is None


def _files_message(body: str) -> dict[str, str]:
    return {"role": "user", "content": f"I have {FILES_MARKER} so you can go ahead.\n{body}"}


def test_chat_files_reads_the_latest_files_message() -> None:
    old = _files_message("\nREADME.md\n```\nold\n```\n")
    new = _files_message("\nREADME.md\n```\nnew\n```\n\nsrc/app.py\n```\nprint(1)\n```\n")
    files = chat_files([old, {"role": "assistant", "content": "Ok."}, new,
                        {"role": "user", "content": "task"}])
    assert [(f.path, f.text, f.fence) for f in files] == [
        ("README.md", "new\n", ("```", "```")), ("src/app.py", "print(1)\n", ("```", "```"))]


def test_chat_files_reads_other_fences_and_files_without_a_final_newline() -> None:
    body = "\nnotes.md\n````\n```py\nx\n```\n````\n\nend.txt\n<source>\nno newline</source>\n"
    files = chat_files([_files_message(body)])
    assert [(f.path, f.text, f.fence) for f in files] == [
        ("notes.md", "```py\nx\n```\n", ("````", "````")),
        ("end.txt", "no newline", ("<source>", "</source>"))]


def test_no_files_message_means_no_files() -> None:
    assert chat_files([{"role": "user", "content": "README.md\n```\nx\n```\n"}]) == []
