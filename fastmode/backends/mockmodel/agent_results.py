"""What a tool returned, read as a model reads it, and the short answer that reports it.

Agents wrap a tool's output: Claude Code's ``Read`` numbers each line (``     1\\t…``), Codex's
``exec_command`` heads it with ``Chunk ID`` / ``Wall time`` / ``Process exited with code N`` /
``Output:``, and harness reminders may follow. The model answers from the content itself:
the line the task asked for, the command's output, what changed; briefly, then it stops.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmode.backends.mockmodel.agent_task import CHANGE, CREATE, RUN, Task
from fastmode.backends.mockmodel.request import message_text

_NUMBERED = re.compile(r"^\s*\d+(?:\t|→|:(?: |$)|\| )")
_EXIT = re.compile(r"(?:Process exited with code|exit code:?|Exit code:?)\s*(-?\d+)", re.I)
_ERROR = re.compile(r"^(?:error|Error|ERROR)\b|No such file|not found|does not exist|"
                    r"Permission denied|EACCES|ENOENT|input is invalid|[Ff]ailed to|"
                    r"<tool_use_error>")
_REMINDER = re.compile(r"(?s)<system-reminder>.*?</system-reminder>")
_CONTENT = re.compile(r"(?s)<content>\n?(.*?)\n?</content>")
_TRAILER = re.compile(r"(?m)^\((?:End of file|Showing lines|File has)[^\n]*\)\s*$")
MAX_QUOTED_LINES = 8  # of a command's output in the answer


@dataclass(frozen=True, slots=True)
class Result:
    """A tool result's content, without the agent's wrapping."""

    text: str
    exit_code: int | None = None
    failed: bool = False

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


def tool_results(messages: Sequence[Mapping[str, Any]], after: int) -> list[Result]:
    """The tool results after message ``after`` (the task), oldest first."""
    return [read_result(message_text(m)) for m in messages[after + 1:]
            if m.get("role") == "tool"]


def read_result(raw: str) -> Result:
    text = _REMINDER.sub("", raw).strip()
    if (inner := _CONTENT.search(text)) is not None:  # opencode: <path>, <type>, <content>
        text = inner.group(1)
    text = _TRAILER.sub("", text)
    exit_code = None
    m = _EXIT.search(text[:400])
    if m is not None:
        exit_code = int(m.group(1))
    head, sep, body = text.partition("\nOutput:\n")
    if sep and "Wall time" in head or head.startswith("Output:"):
        text = body if sep else text.removeprefix("Output:").lstrip("\n")
    lines = text.splitlines()
    numbered = [line for line in lines if _NUMBERED.match(line)]
    if lines and len(numbered) >= max(1, len(lines) // 2):
        lines = [_NUMBERED.sub("", line, count=1) for line in lines if _NUMBERED.match(line)]
        text = "\n".join(lines)
    failed = (exit_code not in (None, 0)) or bool(_ERROR.search(text[:200]))
    return Result(text.strip("\n"), exit_code, failed)


def answer(task: Task, results: Sequence[Result], changed: str = "") -> str:
    """The reply after the tools ran: what the task asked for, from the results."""
    last = results[-1] if results else Result("")
    if task.kind in (CHANGE, CREATE) and changed:
        return changed
    if last.failed:
        first = next((line for line in last.lines if line.strip()), "the tool failed")
        target = task.files[0] if task.files else (task.command or "that")
        return f"I couldn't do it: {target} gave an error:\n\n> {first.strip()}"
    if task.count_lines:
        n = len(last.lines)
        name = task.files[0] if task.files else "The output"
        return f"{name} has {n} line{'s' if n != 1 else ''}."
    if task.line:
        content = [line for line in last.lines]
        if task.line == -1 and content:
            picked, which = content[-1], "last line"
        elif 0 < task.line <= len(content):
            picked, which = content[task.line - 1], _ordinal(task.line) + " line"
        else:
            return f"{task.files[0] if task.files else 'It'} has only {len(content)} lines."
        name = task.files[0] if task.files else "the output"
        return f"The {which} of {name} is:\n\n{picked}"
    if task.kind == RUN:
        shown = last.lines[:MAX_QUOTED_LINES]
        more = len(last.lines) - len(shown)
        tail = f"\n… ({more} more lines)" if more > 0 else ""
        code = "" if last.exit_code is None else f" (exit code {last.exit_code})"
        body = "\n".join(shown) if shown else "(no output)"
        return f"`{task.command}` finished{code}:\n\n```\n{body}{tail}\n```"
    name = task.files[0] if task.files else "The file"
    first = next((line for line in last.lines if line.strip()), "")
    if not first:
        return f"{name} is empty."
    return f"{name} has {len(last.lines)} lines; it begins:\n\n{first}"


def _ordinal(n: int) -> str:
    return {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}.get(n, f"line {n} —")
