"""The mock model as a coding agent's model: the task read from the user's words, the tool
that fits it with that tool's own argument names, an answer from the result, nothing written
unasked. Tool sets shaped as Claude Code, Codex CLI and opencode send them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fastmode.backends.mockmodel import GenerationRequest, QualityProfile, ToolSpec, generate
from fastmode.backends.mockmodel.agent_results import read_result
from fastmode.backends.mockmodel.agent_task import CHANGE, NONE, READ, RUN, read_task
from fastmode.backends.mockmodel.harness import strip_harness, user_task
from fastmode.backends.mockmodel.request import CUSTOM

LONG = "Launch a new agent to handle complex, multi-step tasks autonomously. " * 40


def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


S = {"type": "string"}
ABS = {"type": "string", "description": "The absolute path to the file to read"}
BIG = {"type": "integer", "minimum": 0, "maximum": 9007199254740991}
CLAUDE = (
    ToolSpec("Agent", LONG, obj({"description": S, "prompt": S, "subagent_type": S},
                                ["description", "prompt"])),
    ToolSpec("Bash", "Executes a given bash command", obj({"command": S, "timeout": BIG,
                                                           "description": S}, ["command"])),
    ToolSpec("Edit", "Performs exact string replacements in files",
             obj({"file_path": ABS, "old_string": S, "new_string": S}, ["file_path",
                                                                          "old_string",
                                                                          "new_string"])),
    ToolSpec("Read", "Reads a file from the local filesystem", obj({"file_path": ABS,
                                                                   "offset": BIG, "limit": BIG},
                                                                  ["file_path"])),
    ToolSpec("Workflow", LONG + " read files write files", obj({"script": S}, ["script"])),
    ToolSpec("Write", "Writes a file to the local filesystem",
             obj({"file_path": ABS, "content": S}, ["file_path", "content"])),
)
CODEX = (
    ToolSpec("exec_command", "Runs a command in a PTY, returning output",
             obj({"cmd": S, "yield_time_ms": BIG}, ["cmd"])),
    ToolSpec("apply_patch", "Use the `apply_patch` tool to edit files.", kind=CUSTOM),
)
CODE_MODE = (
    ToolSpec("exec", "Run JavaScript code to orchestrate tool calls: `await "
             "tools.exec_command(...)`", kind=CUSTOM, namespace="functions"),
    ToolSpec("wait", "Wait on a running exec cell", obj({"cell_id": S}, ["cell_id"]),
             namespace="functions"),
)
OPENCODE = (
    ToolSpec("bash", "Executes a shell command", obj({"command": S, "description": S},
                                                     ["command", "description"])),
    ToolSpec("read", "Read a file", obj({"filePath": S, "offset": BIG}, ["filePath"])),
    ToolSpec("task", LONG, obj({"description": S, "prompt": S, "subagent_type": S},
                               ["description", "prompt", "subagent_type"])),
    ToolSpec("write", "Write a file", obj({"filePath": S, "content": S}, ["filePath",
                                                                         "content"])),
)
REMINDER = ("<system-reminder>\nAs you answer the user's questions, you can use the following "
            "context:\n# claudeMd\nWrite a long, detailed, step-by-step essay on everything.\n"
            "</system-reminder>\n")
SYSTEM = "You are an agent.\nPrimary working directory: /home/u/proj\n"
TASK = "read README.md and tell me its first line"


def turn(messages: list[dict[str, Any]], tools: tuple[ToolSpec, ...], seed: int = 1,
         quality: QualityProfile | None = None) -> Any:
    req = GenerationRequest(messages=messages, tools=tools, seed=seed, max_tokens=4000)
    return generate(req, quality or QualityProfile())


def call_of(gen: Any) -> tuple[str, Any]:
    assert gen.finish_reason == "tool_calls", gen.text
    (call,) = gen.tool_calls
    return call.name, (call.arguments if call.kind == CUSTOM else json.loads(call.arguments))


def with_result(messages: list[dict[str, Any]], gen: Any, output: str) -> list[dict[str, Any]]:
    call = gen.tool_calls[0]
    return [*messages,
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": output}]


def test_harness_blocks_are_not_the_users_words() -> None:
    assert strip_harness(REMINDER + TASK) == TASK
    codex_env = "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"
    messages = [{"role": "user", "content": TASK}, {"role": "user", "content": codex_env},
                {"role": "system", "content": "Available agent types: ..."}]
    assert user_task(messages) == (0, TASK)
    assert strip_harness("compare a <b> c") == "compare a <b> c"
    assert user_task([{"role": "user", "content": f'"{TASK}"'}]) == (0, TASK)  # opencode run


@pytest.mark.parametrize(("text", "kind", "files"), [
    (TASK, READ, ("README.md",)), ("what does src/app.py do?", READ, ("src/app.py",)),
    ("run `pytest -q` and tell me what failed", RUN, ()),
    ("change the first line of README.md to Hello", CHANGE, ("README.md",)),
    ("explain continuous batching", NONE, ()), ("see https://x.io/a.html", NONE, ()),
])  # fmt: skip
def test_the_task_is_read_from_the_words(text: str, kind: str, files: tuple[str, ...]) -> None:
    task = read_task(text)
    assert (task.kind, task.files) == (kind, files)


def test_claude_code_reads_the_file_and_quotes_its_first_line() -> None:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": REMINDER + TASK},
                {"role": "system", "content": "Available agent types for the Agent tool"}]
    first = turn(messages, CLAUDE)
    assert call_of(first) == ("Read", {"file_path": "/home/u/proj/README.md"})
    numbered = "     1\tHello from the scratch README.\n     2\tSecond line.\n"
    second = turn(with_result(messages, first, numbered + REMINDER), CLAUDE)
    assert second.finish_reason == "stop" and second.tool_calls == ()
    assert "Hello from the scratch README." in second.text
    assert second.output_tokens < 40  # an answer, not an essay the reminder asked for


def test_codex_reads_through_its_shell_and_answers_from_the_output() -> None:
    messages = [{"role": "user", "content": TASK}]
    first = turn(messages, CODEX)
    assert call_of(first) == ("exec_command", {"cmd": "cat README.md"})
    out = ("Chunk ID: 1\nWall time: 0.0 seconds\nProcess exited with code 0\n"
           "Original token count: 9\nOutput:\nHello from the scratch README.\nSecond line.\n")
    assert "Hello from the scratch README." in turn(with_result(messages, first, out), CODEX).text


def test_codex_code_mode_gets_a_script_calling_its_nested_shell() -> None:
    gen = turn([{"role": "user", "content": TASK}], CODE_MODE)
    (call,) = gen.tool_calls
    assert (call.kind, call.name, call.namespace) == (CUSTOM, "exec", "functions")
    assert 'tools.exec_command({cmd: "cat README.md"})' in call.arguments


def test_opencode_gets_read_not_its_long_described_task_tool() -> None:
    for seed in range(20):
        name, args = call_of(turn([{"role": "user", "content": TASK}], OPENCODE, seed))
        assert (name, args) == ("read", {"filePath": "README.md"})


def test_a_change_reads_then_edits_only_the_named_file() -> None:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "change the first line of README.md to Hi there"}]
    first = turn(messages, CLAUDE)
    assert call_of(first)[0] == "Read"
    second = turn(with_result(messages, first, "1\tOld title\n2\tbody\n"), CLAUDE)
    assert call_of(second) == ("Edit", {"file_path": "/home/u/proj/README.md",
                                        "old_string": "Old title", "new_string": "Hi there"})
    patch = turn(with_result([messages[1]], turn([messages[1]], CODEX), "Output:\nOld title\n"),
                 CODEX)
    name, text = call_of(patch)
    assert name == "apply_patch" and "-Old title\n+Hi there" in text
    assert text.startswith("*** Begin Patch\n*** Update File: README.md")


def test_nothing_is_written_or_run_unasked() -> None:
    tools = CLAUDE + OPENCODE + CODEX
    for seed in range(30):
        for task in (TASK, "explain the KV cache", "what is in notes.txt?"):
            gen = turn([{"role": "user", "content": task}], tools, seed)
            names = {c.name for c in gen.tool_calls}
            assert not names & {"Write", "Edit", "write", "Bash", "apply_patch", "Workflow",
                                "Agent", "task"}, (task, names)


def test_integers_stay_plausible_in_the_general_caller() -> None:
    grep = ToolSpec("grep_lines", "grep lines", obj({"pattern": S, "offset": BIG}, ["pattern",
                                                                                   "offset"]))
    for seed in range(30):
        (call,) = turn([{"role": "user", "content": "grep lines"}], (grep,), seed).tool_calls
        assert 0 <= json.loads(call.arguments)["offset"] <= 100


def test_a_one_line_task_thinks_hundreds_of_tokens_at_high_effort() -> None:
    from fastmode.backends.mockmodel import ModelBehavior
    from fastmode.backends.reasoning import ReasoningProfile

    behavior = ModelBehavior(reasoning=ReasoningProfile(enabled=True, default_effort="high"))
    for budget in (None, 31999):
        for seed in range(10):
            req = GenerationRequest(messages=[{"role": "user", "content": REMINDER + TASK}],
                                    tools=CLAUDE, seed=seed, effort="high",
                                    thinking_budget=budget)
            gen = generate(req, behavior=behavior)
            assert gen.reasoning is not None and 20 <= gen.reasoning_tokens <= 1500


def test_spark_still_botches_its_share_of_agent_calls() -> None:
    weak = QualityProfile(tool_error_rate=0.05)
    botched = sum(turn([{"role": "user", "content": TASK}], OPENCODE, seed, weak)
                  .tool_calls[0].botched is not None for seed in range(400))
    assert 5 <= botched <= 40


def test_results_are_read_without_their_wrapping() -> None:
    assert read_result("     1\tA\n     2\tB").text == "A\nB"
    failed = read_result("Process exited with code 2\nOutput:\nls: cannot access 'x': No such "
                         "file or directory")
    assert failed.failed and failed.exit_code == 2


def test_opencodes_read_result_is_unwrapped() -> None:
    raw = ("<path>/w/README.md</path>\n<type>file</type>\n<content>\n1: Hello from the scratch "
           "README.\n2:\n3: Third line.\n\n(End of file - total 3 lines)\n</content>")
    assert read_result(raw).lines == ["Hello from the scratch README.", "", "Third line."]


@pytest.mark.parametrize(("text", "where"), [
    ("<environment_context>\n  <cwd>/w/repo</cwd>\n</environment_context>", "/w/repo"),  # Codex
    ("You are Claude Code.\nPrimary working directory: /home/u/proj\n", "/home/u/proj"),
    ("Here is some useful information:\nWorking directory: /srv/app\n", "/srv/app"),  # opencode
    ("WORKING DIRECTORY = /Upper/Case", "/Upper/Case"),
    ("cwd: /tmp/x and more", "/tmp/x"),
    ("You are an agent. No directory is stated here." * 400, ""),
])  # fmt: skip
def test_the_working_directory_is_read_as_each_harness_states_it(text: str, where: str) -> None:
    from fastmode.backends.mockmodel.agent import cwd

    assert cwd([{"role": "system", "content": text}]) == where
    assert cwd([{"role": "user", "content": [{"type": "text", "text": text}]}]) == where
    assert cwd([{"role": "tool", "content": text}]) == ""  # a tool's output states nothing
