"""Replies in a text-editing agent's edit format, so the agent applies the edit it asked for.

aider asks the model, in its system prompt, to answer with the whole new file (``whole``),
SEARCH/REPLACE blocks (``diff``, also ``diff-fenced`` and the editor formats) or a unified diff
(``udiff``), and applies what comes back; prose is applied as nothing. When the system prompt
carries one of those formats' instructions (matched on a short phrase of each), the files are
in the chat (``chat_files``) and the task is one ``edits`` reads, the reply is a one-sentence
preface and the edit in that format; otherwise there is no edit reply and the model answers as
it would anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmode.backends.mockmodel.agent_task import asks_change
from fastmode.backends.mockmodel.chat_files import ChatFile, chat_files
from fastmode.backends.mockmodel.edits import Edit, requested_edit
from fastmode.backends.mockmodel.pieces import finish_text
from fastmode.backends.mockmodel.request import Generation, GenerationRequest, message_text
from fastmode.backends.mockmodel.streams import Streams

SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class EditFormat:
    """An edit format: its name, a phrase only its instructions contain, and how its reminder
    starts (aider may append the reminder to the task's own message: it is cut off there)."""

    name: str
    marker: str
    reminder: str


# udiff first: its instructions are the only ones naming `diff -U0`
FORMATS = (
    EditFormat("udiff", "`diff -U0`", "# File editing rules"),
    EditFormat("diff", "*SEARCH/REPLACE block*", "# *SEARCH/REPLACE block* Rules"),
    EditFormat("whole", "*file listing*", "To suggest changes to a file you MUST return"),
)

_PREFACES = (
    "I will {summary} in {path}.",
    "To do that, I will {summary} in {path}.",
    "This needs one change: {summary} in {path}.",
)


def edit_format_reply(req: GenerationRequest, streams: Streams) -> Generation | None:
    """The edit reply to ``req`` (cut by its ``max_tokens`` and ``stop``), or None when it asks
    for no edit format, its last turn is not the user's, or no chat file takes the task's
    edit."""
    fmt = asked_format(req.messages)
    if fmt is None:
        return None
    task = task_text(req.messages, fmt)
    if task is None:
        return None
    target = find_target(task, chat_files(req.messages))
    if target is None:
        if not asks_change(task):
            return None  # a question about the files: the ordinary answer
        # a change it cannot place: ask, as the prompt says to, rather than write a block
        return finish_text(_UNCLEAR, req.max_tokens, req.stop)
    file, edit = target
    preface = streams("edit").choice(_PREFACES).format(summary=edit.summary, path=file.path)
    return finish_text(render(fmt.name, file, edit, preface), req.max_tokens, req.stop)


_UNCLEAR = ("I'm not sure which text to change in the files you added. Which line should "
            "change, and to what?")


def asked_format(messages: Sequence[Mapping[str, Any]]) -> EditFormat | None:
    """The format the system prompt asks for; a model sent no system prompt gets it as the
    conversation's first message instead."""
    system = [message_text(m) for m in messages if m.get("role") in SYSTEM_ROLES]
    texts = system or [message_text(m) for m in messages[:1]]
    for fmt in FORMATS:
        if any(fmt.marker in text for text in texts):
            return fmt
    return None


def task_text(messages: Sequence[Mapping[str, Any]], fmt: EditFormat) -> str | None:
    """The user's last message, without a reminder appended to it, when it is the last turn
    (system messages after it aside), else None."""
    for message in reversed(messages):
        role = message.get("role")
        if role in SYSTEM_ROLES:
            continue
        if role != "user":
            return None
        text = message_text(message)
        cut = text.find(fmt.reminder)
        return text[:cut] if cut >= 0 else text
    return None


def find_target(task: str, files: Sequence[ChatFile]) -> tuple[ChatFile, Edit] | None:
    """The file to edit and its edit: files the task names first, then the rest, in order."""
    def named(file: ChatFile) -> bool:
        return file.path in task or file.path.rsplit("/", 1)[-1] in task

    for file in sorted(files, key=lambda f: not named(f)):  # stable: order kept within each
        edit = requested_edit(task, file.text, file.path)
        if edit is not None:
            return file, edit
    return None


def render(name: str, file: ChatFile, edit: Edit, preface: str) -> str:
    """The reply in format ``name``: the preface, a blank line, the edit block."""
    opening, closing = file.fence
    if name == "whole":
        block = f"{file.path}\n{opening}\n{_lines(edit.text)}{closing}\n"
    elif name == "diff":
        block = (f"{file.path}\n{opening}\n<<<<<<< SEARCH\n{_lines(edit.old)}=======\n"
                 f"{_lines(edit.new)}>>>>>>> REPLACE\n{closing}\n")
    else:  # udiff: always fenced as diff (every line of it starts with -, + or a space)
        block = f"```diff\n--- a/{file.path}\n+++ b/{file.path}\n{hunk(edit)}```\n"
    return f"{preface}\n\n{block}"


def hunk(edit: Edit) -> str:
    """One ``@@ ... @@`` hunk: the lines old and new share at either end as context, the
    rest as removed and added lines."""
    old, new = edit.old.splitlines(), edit.new.splitlines()
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    body = ([f" {line}" for line in old[:head]]
            + [f"-{line}" for line in old[head:len(old) - tail]]
            + [f"+{line}" for line in new[head:len(new) - tail]]
            + [f" {line}" for line in old[len(old) - tail:]])
    return "@@ ... @@\n" + "".join(line + "\n" for line in body)


def _lines(text: str) -> str:
    """``text`` ending with a newline (nothing stays nothing), as a block's lines must."""
    return text if not text or text.endswith("\n") else text + "\n"
