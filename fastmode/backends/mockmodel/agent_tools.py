"""Which offered tool does what, and its arguments in that tool's own names.

Agents name their tools differently (Claude Code ``Read``/``Bash``/``Edit``, Codex
``exec_command`` and the freeform ``apply_patch``, opencode ``read``/``bash``/``edit``, pi
``read``/``bash``/``edit``) and name their arguments differently (``file_path``, ``filePath``,
``path``; ``command``, ``cmd``; ``old_string``, ``oldString``). A tool's job is read from its
name first, its schema second; its arguments are filled by the names its schema declares, so
the call is one the agent can run. Codex's code mode (gpt-6.x: one freeform ``exec`` tool that
runs JavaScript calling ``tools.exec_command(...)``) gets a script that does the same.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmode.backends.mockmodel.request import CUSTOM, ToolSpec

READ, SHELL, EDIT, PATCH, WRITE, CODE = "read", "shell", "edit", "patch", "write", "code"
# the tools that change the workspace: called only when the task asks for a change
WRITES = frozenset({SHELL, EDIT, PATCH, WRITE, CODE})

_NAMES = {
    READ: {"read", "read_file", "readfile", "view", "view_file", "cat", "open_file", "file_read",
           "get_file_contents", "read_text_file"},
    SHELL: {"bash", "shell", "exec_command", "run_command", "terminal", "run_shell_command",
            "execute_command", "local_shell", "run_terminal_cmd", "sh", "command"},
    EDIT: {"edit", "edit_file", "str_replace", "str_replace_editor", "replace", "multiedit",
           "apply_edit", "replace_in_file", "str_replace_based_edit_tool"},
    PATCH: {"apply_patch", "patch"},
    WRITE: {"write", "write_file", "create_file", "write_to_file"},
}  # fmt: skip
PATH_KEYS = ("file_path", "filePath", "path", "filename", "file", "target_file",
             "absolute_path", "notebook_path")
COMMAND_KEYS = ("command", "cmd", "script", "commandLine")
OLD_KEYS = ("old_string", "oldString", "old_str", "old_text", "oldText", "search", "old")
NEW_KEYS = ("new_string", "newString", "new_str", "new_text", "newText", "replacement", "new")
CONTENT_KEYS = ("content", "contents", "text", "file_text", "data")
PATCH_KEYS = ("input", "patch", "diff")


@dataclass(frozen=True, slots=True)
class Offered:
    """An offered tool and the job it does."""

    tool: ToolSpec
    role: str


def roles(tools: Sequence[ToolSpec]) -> dict[str, Offered]:
    """The first offered tool for each job (a tool with no job known here is left out)."""
    out: dict[str, Offered] = {}
    for tool in tools:
        role = _role(tool)
        if role is not None and role not in out:
            out[role] = Offered(tool, role)
    return out


def _role(tool: ToolSpec) -> str | None:
    name = tool.name.lower()
    if tool.kind == CUSTOM:
        if name == "exec" and "tools.exec_command" in tool.description:
            return CODE
        return PATCH if name in _NAMES[PATCH] else None
    for role, names in _NAMES.items():
        if name in names:
            return role
    props = properties(tool)
    if any(k in props for k in COMMAND_KEYS) and not any(k in props for k in PATH_KEYS):
        return SHELL if re.search(r"\b(shell|command|terminal)\b", tool.description, re.I) \
            else None
    return None


def properties(tool: ToolSpec) -> Mapping[str, Any]:
    props = tool.parameters.get("properties")
    return props if isinstance(props, Mapping) else {}


def _key(tool: ToolSpec, keys: Sequence[str]) -> str | None:
    props = properties(tool)
    return next((k for k in keys if k in props), None)


def path_for(tool: ToolSpec, key: str, name: str, cwd: str) -> str:
    """``name`` as the tool wants it: absolute when its schema says so and the cwd is known."""
    description = str(properties(tool).get(key, {}).get("description", ""))
    if cwd and not name.startswith("/") and re.search(r"\babsolute\b", description, re.I):
        return posixpath.join(cwd, name)
    return name


def arguments(offered: Offered, task_words: str, *, path: str = "", command: str = "",
              old: str = "", new: str = "", content: str = "", patch: str = "",
              cwd: str = "") -> str:
    """The call's input: a JSON object in the tool's own argument names (the required ones the
    job does not set get a plain value), or a freeform tool's raw text."""
    tool = offered.tool
    if tool.kind == CUSTOM:
        if offered.role == CODE:
            return code_mode(command, patch)
        return patch
    args: dict[str, Any] = {}
    props = properties(tool)
    for keys, value in ((PATH_KEYS, path), (COMMAND_KEYS, command), (OLD_KEYS, old),
                        (NEW_KEYS, new), (CONTENT_KEYS, content), (PATCH_KEYS, patch)):
        key = _key(tool, keys)
        if key is None or not (value or keys is NEW_KEYS and old):
            continue
        if keys is PATH_KEYS:
            value = path_for(tool, key, value, cwd)
        if keys is COMMAND_KEYS and props[key].get("type") == "array":
            args[key] = ["bash", "-lc", value]
        else:
            args[key] = value
    if old and _key(tool, OLD_KEYS) is None:  # pi: ``edits: [{oldText, newText}]``
        for key, schema in props.items():
            items = schema.get("items") if isinstance(schema, Mapping) else None
            inner = items.get("properties") if isinstance(items, Mapping) else None
            if isinstance(inner, Mapping):
                o = next((k for k in OLD_KEYS if k in inner), None)
                n = next((k for k in NEW_KEYS if k in inner), None)
                if o and n:
                    args[key] = [{o: old, n: new}]
                    break
    for key in tool.parameters.get("required") or ():
        if key not in args and isinstance(key, str):
            args[key] = _plain(props.get(key, {}), task_words)
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def _plain(schema: Any, words: str) -> Any:
    """A required argument the job leaves open: its default, its first choice, or a small
    plain value of its type (a description: the task's words)."""
    if not isinstance(schema, Mapping):
        return words
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return words[:80]


def code_mode(command: str, patch: str) -> str:
    """Codex's code mode: JavaScript that runs the command (or applies the patch) through the
    nested tools and returns its output as the cell's text."""
    if patch:
        return f"const r = await tools.apply_patch({json.dumps(patch)});\ntext(r);\n"
    return (f"const r = await tools.exec_command({{cmd: {json.dumps(command)}}});\n"
            "text(r.output);\n")


def update_patch(path: str, old: str, new: str) -> str:
    """An ``apply_patch`` envelope (Codex's patch format) that replaces ``old`` lines by
    ``new`` lines in ``path``; an empty ``old`` appends ``new``."""
    body = [f"-{line}" for line in old.splitlines()] + [f"+{line}" for line in new.splitlines()]
    return "*** Begin Patch\n*** Update File: " + path + "\n@@\n" + "\n".join(body) + \
        "\n*** End Patch"


def add_patch(path: str, content: str) -> str:
    """An ``apply_patch`` envelope that creates ``path`` with ``content``."""
    lines = "\n".join(f"+{line}" for line in content.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}\n*** End Patch"
