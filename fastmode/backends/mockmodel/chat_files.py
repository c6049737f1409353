"""The files a text-editing agent put in the chat for editing, with their current contents.

aider sends each editable file, after a line saying it has *added these files to the chat*, as
the file's path on a line, an opening fence line, the content and a closing fence line. Its
fence is three backticks unless the files hold such lines themselves: then four backticks or a
tag pair (``<source>`` … ``</source>``), so the fence is read from the message, not assumed. A
file whose content has no final newline has the closing fence at the end of its last line.
Only the latest such message counts: aider resends the files, as they now are, every turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmode.backends.mockmodel.request import message_text

FILES_MARKER = "*added these files to the chat*"
_FENCE = re.compile(r"^(`{3,}|<(\w+)>)$")


@dataclass(frozen=True, slots=True)
class ChatFile:
    """A file offered for editing: its path as the agent names it, its text, and the fence
    (opening, closing) its listing used, which the agent expects edit blocks to use too."""

    path: str
    text: str
    fence: tuple[str, str]


def chat_files(messages: Sequence[Mapping[str, Any]]) -> list[ChatFile]:
    """The files of the conversation's latest files message (user or assistant), in order."""
    for message in reversed(messages):
        if message.get("role") not in ("user", "assistant"):
            continue
        text = message_text(message)
        at = text.find(FILES_MARKER)
        if at >= 0:
            return parse_listings(text[at + len(FILES_MARKER):])
    return []


def parse_listings(text: str) -> list[ChatFile]:
    """Every ``PATH`` / fence / content / fence listing in ``text``."""
    lines = text.split("\n")
    files: list[ChatFile] = []
    i = 1
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        path = lines[i - 1].strip()
        if opening is None or not path or _FENCE.match(path):
            i += 1
            continue
        close = opening.group(1) if opening.group(2) is None else f"</{opening.group(2)}>"
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not _closes(lines, j, close):
            body.append(lines[j])
            j += 1
        if j == len(lines):  # never closed: not a listing
            break
        last = lines[j][: -len(close)]
        content = "\n".join(body) + "\n" if body else ""
        files.append(ChatFile(path, content + last, (opening.group(1), close)))
        i = j + 2
    return files


def _closes(lines: list[str], j: int, close: str) -> bool:
    """Line ``j`` ends a listing: it ends with the fence and a blank line (or nothing) follows,
    as the agent writes a blank line before each next path."""
    return lines[j].endswith(close) and (j + 1 == len(lines) or lines[j + 1] == "")
