"""The mock model as a coding agent's model: one step of a task at a time, with the tools the
agent offers, and an answer from what they returned.

When the offered tools include a coding agent's (a file reader, a shell, an editor, Codex's
code mode: ``agent_tools``), the model works the user's task (``agent_task``, read from the
user's own words, not the harness's: ``harness``) as a small agent loop would:

* read: call the read tool with the file named (or ``cat`` it through the shell), then answer
  with what the task asked for (the first line, the line count…) and stop;
* run: call the shell with the command, then report its output;
* change: read the file, make the one edit the task names through the edit tool (or
  ``apply_patch``, or the write tool with the whole new text), then say what changed;
* anything else: answer in text.

Tools that write, edit or run are called only when the task asks for a change or a command,
and only on what it names; a task of more than ``MAX_STEPS`` tool results is answered. With
tools that are not a coding agent's (a weather function), the general tool caller
(``toolcalls``) decides, as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fastmode.backends.mockmodel.agent_results import Result, answer, tool_results
from fastmode.backends.mockmodel.agent_task import (
    CHANGE,
    CREATE,
    NONE,
    READ,
    RUN,
    Task,
    asks_change,
    read_task,
)
from fastmode.backends.mockmodel.agent_tools import (
    CODE,
    EDIT,
    PATCH,
    SHELL,
    WRITE,
    WRITES,
    Offered,
    add_patch,
    arguments,
    roles,
    update_patch,
)
from fastmode.backends.mockmodel.agent_tools import READ as READ_TOOL
from fastmode.backends.mockmodel.behavior import DEFAULT_BEHAVIOR, ModelBehavior
from fastmode.backends.mockmodel.botching import maybe_botch
from fastmode.backends.mockmodel.harness import user_task
from fastmode.backends.mockmodel.pieces import finish_text, finish_tool_calls
from fastmode.backends.mockmodel.prose import text_reply
from fastmode.backends.mockmodel.request import (
    CUSTOM,
    Generation,
    GenerationRequest,
    QualityProfile,
    ToolCall,
    ToolSpec,
)
from fastmode.backends.mockmodel.streams import Streams
from fastmode.backends.mockmodel.toolcalls import call_id

MAX_STEPS = 4  # tool results after the task before the model answers whatever it has
_CWD = re.compile(r"<cwd>([^<\n]+)</cwd>|(?:Primary working directory|Working directory|"
                  r"Current working directory|cwd)\s*[:=]\s*(/[^\s`'\"]+)", re.IGNORECASE)
_DESTRUCTIVE = re.compile(r"(?:^|_|\b)(write|edit|delete|remove|rm|exec|bash|shell|patch)",
                          re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Step:
    """The model's next move: a call (``tool`` with its raw ``arguments``) or a text reply
    (``text``; empty: free prose about the task)."""

    tool: Offered | None = None
    arguments: str = ""
    text: str = ""


def agent_reply(req: GenerationRequest, streams: Streams, quality: QualityProfile,
                behavior: ModelBehavior = DEFAULT_BEHAVIOR) -> Generation | None:
    """This turn of a coding task, or None when the offered tools are not a coding agent's
    (or the request forces a tool): the general path then answers."""
    if not req.tools or req.tool_choice not in ("auto", "required"):
        return None
    offered = roles(req.tools)
    if not offered:
        return None
    index, text = user_task(req.messages)
    if index < 0:
        return None
    task = read_task(text)
    step = next_step(task, offered, tool_results(req.messages, index), cwd(req.messages))
    if step.tool is None:
        if not step.text:
            if req.tool_choice == "required":
                return None
            return text_reply(req, streams, None, behavior.replies)
        return finish_text(step.text, req.max_tokens, req.stop)
    call = ToolCall(call_id(streams("call_id")), step.tool.tool.name, step.arguments,
                    kind=step.tool.tool.kind, namespace=step.tool.tool.namespace)
    return finish_tool_calls([_botched(call, step.tool.tool, req.tools, quality, streams)],
                             req.max_tokens)


def next_step(task: Task, offered: Mapping[str, Offered], results: Sequence[Result],
              cwd: str) -> Step:
    """The step after ``results`` (the tool results since the task was given)."""
    if len(results) >= MAX_STEPS or (results and results[-1].failed):
        return Step(text=answer(task, results))
    if task.kind == READ:
        return _read(task, offered, cwd) if not results else Step(text=answer(task, results))
    if task.kind == RUN:
        if results:
            return Step(text=answer(task, results))
        tool = offered.get(SHELL) or offered.get(CODE)
        if tool is None:
            return Step(text=f"I have no shell here to run `{task.command}`.")
        return Step(tool, arguments(tool, task.text, command=task.command))
    if task.kind == CHANGE:
        return _change(task, offered, results, cwd)
    if task.kind == CREATE:
        return _create(task, offered, results, cwd)
    assert task.kind == NONE
    return Step()


def _read(task: Task, offered: Mapping[str, Offered], cwd: str) -> Step:
    name = task.files[0]
    tool = offered.get(READ_TOOL)
    if tool is not None:
        return Step(tool, arguments(tool, f"Read {name}", path=name, cwd=cwd))
    tool = offered.get(SHELL) or offered.get(CODE)
    if tool is None:
        return Step(text=f"I can't open {name} from here: no tool that reads files is offered.")
    return Step(tool, arguments(tool, f"Show {name}", command=f"cat {_quote(name)}"))


def _change(task: Task, offered: Mapping[str, Offered], results: Sequence[Result],
            cwd: str) -> Step:
    name = task.files[0]
    if not results:
        return _read(task, offered, cwd)
    edit = requested_edit(task.text, results[0].text)
    if len(results) >= 2 and edit is not None:  # read, then edited: report it
        return Step(text=f"Done: in {name}, `{edit[0]}` is now `{edit[1]}`.")
    if edit is None:
        return Step(text=f"I read {name}, but I could not tell which text to change. Which "
                         "line should change, and to what?")
    old, new = edit
    if (tool := offered.get(EDIT)) is not None:
        return Step(tool, arguments(tool, f"Edit {name}", path=name, old=old, new=new, cwd=cwd))
    patch = update_patch(name, old, new)
    if (tool := offered.get(PATCH) or offered.get(CODE)) is not None:
        return Step(tool, arguments(tool, f"Edit {name}", patch=patch))
    if (tool := offered.get(WRITE)) is not None:
        whole = results[0].text.replace(old, new, 1)
        return Step(tool, arguments(tool, f"Write {name}", path=name, content=whole + "\n",
                                    cwd=cwd))
    if (tool := offered.get(SHELL)) is not None:
        return Step(tool, arguments(tool, f"Edit {name}", command=shell_edit(patch)))
    return Step(text=f"I would change `{old}` to `{new}` in {name}, but no tool that edits "
                     "files is offered.")


def _create(task: Task, offered: Mapping[str, Offered], results: Sequence[Result],
            cwd: str) -> Step:
    name = task.files[0]
    if results:
        return Step(text=f"Created {name}.")
    quoted = re.findall(r"[\"'`]([^\"'`\n]+)[\"'`]", task.text)
    content = next((q for q in quoted if q != name), f"# {name}") + "\n"
    if (tool := offered.get(WRITE)) is not None:
        return Step(tool, arguments(tool, f"Create {name}", path=name, content=content, cwd=cwd))
    if (tool := offered.get(PATCH) or offered.get(CODE)) is not None:
        return Step(tool, arguments(tool, f"Create {name}", patch=add_patch(name, content)))
    return Step(text=f"No tool that writes files is offered, so I can't create {name}.")


def shell_edit(patch: str) -> str:
    """A shell command that makes the edit: Codex's ``apply_patch`` (which its shell runs
    itself) as a heredoc, which a POSIX shell without it reports as a missing command."""
    return f"apply_patch <<'PATCH'\n{patch}\nPATCH"


def requested_edit(task: str, file_text: str) -> tuple[str, str] | None:
    """(old, new): the one edit ``task`` names on a file whose text is ``file_text``: "change
    the first (last, Nth) line to X", "replace A with B", "change A to B"."""
    lines = file_text.splitlines()
    m = re.search(r"\b(first|last|line\s+(\d+))\b(?:\s+line)?\b.*?\bto\s+(.+?)\s*$", task,
                  re.IGNORECASE)
    if m is not None and lines:
        at = 0 if m.group(1).lower() == "first" else -1 if m.group(1).lower() == "last" \
            else int(m.group(2)) - 1
        if -len(lines) <= at < len(lines):
            return lines[at], _unquote(m.group(3))
    m = re.search(r"\b(?:replace|change|rename)\s+(.+?)\s+(?:with|to|by|into)\s+(.+?)"
                  r"(?:\s+in\s+\S+)?\s*$", task, re.IGNORECASE)
    if m is not None:
        old, new = _unquote(m.group(1)), _unquote(m.group(2))
        if old and old in file_text:
            return old, new
    return None


def _unquote(text: str) -> str:
    text = text.strip().rstrip(".")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        return text[1:-1]
    return text


def cwd(messages: Sequence[Mapping[str, Any]]) -> str:
    """The agent's working directory, as its harness states it (Codex's ``<cwd>``, Claude
    Code's and opencode's "working directory:" lines); "" when none is stated."""
    for message in messages:
        if message.get("role") not in ("system", "developer", "user"):
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else " ".join(
            str(p.get("text", "")) for p in content or () if isinstance(p, Mapping))
        head = text[:65536]
        low = head.lower()  # (a scan for the words first: the pattern alone is ~20x slower)
        if "cwd" not in low and "working directory" not in low:
            continue
        if (m := _CWD.search(head)) is not None:
            return (m.group(1) or m.group(2)).strip()
    return ""


def safe_tools(req: GenerationRequest) -> GenerationRequest:
    """The request with the tools that write, edit, delete or run left out, unless the task
    asks for a change or a command: the general tool caller never picks one unasked."""
    text = user_task(req.messages)[1]
    task = read_task(text)
    if (task.kind in (CHANGE, CREATE, RUN) or asks_change(text)
            or req.tool_choice not in ("auto", "required")):
        return req
    kept = tuple(t for t in req.tools if not _writes(t))
    return req if len(kept) == len(req.tools) else replace(req, tools=kept)


def _writes(tool: ToolSpec) -> bool:
    offered = roles([tool])
    if offered:
        return next(iter(offered)) in WRITES
    return bool(_DESTRUCTIVE.search(tool.name))


def _botched(call: ToolCall, tool: ToolSpec, tools: Sequence[ToolSpec],
             quality: QualityProfile, streams: Streams) -> ToolCall:
    """The quality profile's share of mistakes (a weak model's wrong name, broken JSON…); a
    freeform call can only be misnamed."""
    if tool.kind == CUSTOM:
        quality = replace(quality, error_kinds={"unknown_tool": 1.0})
    try:
        parsed = json.loads(call.arguments) if tool.kind != CUSTOM else {}
    except ValueError:
        parsed = {}
    return maybe_botch(call, parsed if isinstance(parsed, dict) else {}, tool, tools, quality,
                       streams("botch"))


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[\w./-]+", name) else "'" + name.replace("'", "'\\''") + "'"
