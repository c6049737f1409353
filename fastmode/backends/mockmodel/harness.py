"""What the user wrote, apart from what their agent harness wrapped around it.

Coding agents put their own text into user turns: Claude Code's ``<system-reminder>`` blocks
(the date, CLAUDE.md, the agent types), Codex's ``<environment_context>`` and AGENTS.md
``<INSTRUCTIONS>``, opencode's and pi's environment blocks. A model reads them as context, not
as the question: the mock model takes its cues (how long, how hard, which file, which tool)
from the user's own words only, so a one-line task inside 6 KB of harness text is still a
one-line task. The harness text is still the agent's prompt: it is counted and billed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastmode.backends.mockmodel.request import cue_text, message_text

# A block an agent harness wraps in a tag of its own: ``<system-reminder>…</system-reminder>``,
# ``<environment_context>…``, ``<INSTRUCTIONS>…``, ``<user_instructions>…``. Only tags of words
# joined by - or _ (as harnesses name theirs), opened at a line's start and closed by the same
# name, so a user's ``a <b> c`` or a code sample's HTML stays.
_BLOCK = re.compile(r"(?ms)^[ \t]*<([A-Za-z][A-Za-z0-9]*(?:[_ -][A-Za-z0-9]+)*)(?:\s[^>\n]*)?>"
                    r".*?</\1>[ \t]*$")
# headings harnesses put before such a block ("# AGENTS.md instructions for /repo")
_HEADING = re.compile(r"(?m)^#+ *(AGENTS|CLAUDE)\.md instructions[^\n]*$")


def strip_harness(text: str) -> str:
    """``text`` without the blocks an agent harness adds, trimmed."""
    if "<" not in text and "instructions" not in text:
        return text.strip()
    return _HEADING.sub("", _BLOCK.sub("", text)).strip()


def user_task(messages: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """(index, text) of the conversation's last user turn that holds the user's own words;
    (-1, "") when there is none (every user turn is harness text, or none is a user's)."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") != "user":
            continue
        text = strip_harness(cue_text(message_text(message)))  # bounded: the regex is linear
                                                                # per block, not per prompt
        if len(text) > 2 and text[0] == text[-1] == '"' and '"' not in text[1:-1]:
            text = text[1:-1]  # opencode run sends the task quoted: "read README.md …"
        if text:
            return i, text
    return -1, ""
