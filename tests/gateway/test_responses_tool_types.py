"""The Responses API's tool types and input items as the protocol reads them (no server).

Every tool type openai-python's ``ToolParam`` union defines is accepted: functions, namespaces
(flattened, the namespace kept on each spec), custom tools (freeform, a grammar kept) and the
hosted tools (accepted, never given to the mock model). Declarations come from ``tools`` and from
``additional_tools`` input items (what Codex CLI sends for its gpt-6.x models: the request in
``tests/data/codex_responses_request.json`` is one it sent). Input items the API defines are
read as the conversation; custom tool calls and their outputs in Chat's shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fastmode.backends.mockmodel.request import CUSTOM, FUNCTION
from fastmode.backends.tokenizer import count_chat_prompt
from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols.openai_responses.items import answered_calls, input_messages
from fastmode.gateway.protocols.openai_responses.tools import HOSTED_REQUIRED, declared, tool_groups

CODEX = json.loads((Path(__file__).parent.parent / "data" / "codex_responses_request.json")
                   .read_text())
FN = {"type": "function", "name": "read_file", "description": "Read a file",
      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch"}
# one of each hosted type, with the fields the API requires of it
HOSTED = [{"type": kind, **{name: _v for name, _v in {
    "vector_store_ids": ["vs_1"], "display_height": 768, "display_width": 1024,
    "environment": "linux", "server_label": "docs", "container": {"type": "auto"}}.items()
    if name in need}} for kind, need in HOSTED_REQUIRED.items()]


def everyone(item: Any) -> bool:
    return True


def rejected(tools: list[Any], items: Any = "hi") -> APIError:
    with pytest.raises(APIError) as err:
        declared(tool_groups(tools, items))
    assert err.value.status == 400
    return err.value


def test_codex_additional_tools_become_namespaced_specs() -> None:
    tools = declared(tool_groups(CODEX.get("tools"), CODEX["input"]))
    by_name = {(s.namespace, s.name): s for s in tools.specs}
    carried = CODEX["input"][0]["tools"]
    assert len(tools.specs) == sum(len(ns["tools"]) for ns in carried)
    exec_ = by_name[("functions", "exec")]
    assert exec_.kind == CUSTOM and "start:" in exec_.grammar and exec_.parameters == {}
    assert by_name[("clock", "sleep")].kind == FUNCTION
    assert "duration_ms" in by_name[("clock", "sleep")].parameters["properties"]
    assert {s.namespace for s in tools.specs} == {ns["name"] for ns in carried}
    assert list(tools.raw) == carried  # counted as prompt, as sent
    # the declarations are part of the prompt: counted as the tools[] they stand for
    messages = input_messages(None, CODEX["input"], everyone)
    assert count_chat_prompt(messages, list(tools.raw)) > count_chat_prompt(messages) + 1000


def test_every_tool_type_is_accepted_and_hosted_ones_are_never_offered() -> None:
    ns = {"type": "namespace", "name": "multi_agent_v1", "description": "agents",
          "tools": [{**FN, "name": "spawn_agent"}, {**PATCH, "name": "note"}]}
    tools = declared(tool_groups([FN, ns, PATCH, *HOSTED], "hi"))
    assert [(s.namespace, s.name, s.kind) for s in tools.specs] == [
        ("", "read_file", FUNCTION), ("multi_agent_v1", "spawn_agent", FUNCTION),
        ("multi_agent_v1", "note", CUSTOM), ("", "apply_patch", CUSTOM)]
    assert tools.hosted == tuple(HOSTED_REQUIRED)
    assert [p for _, _, p in tools.strict] == ["tools[0].parameters",
                                               "tools[1].tools[0].parameters"]


def test_custom_formats() -> None:
    lark = {**PATCH, "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
    text = {**PATCH, "name": "free", "format": {"type": "text"}}
    regex = {**PATCH, "name": "num", "format": {"type": "grammar", "syntax": "regex",
                                                "definition": r"\d+"}}
    specs = declared(tool_groups([lark, text, regex], "hi")).specs
    assert [s.grammar for s in specs] == ["start: /.+/", "", r"\d+"]
    err = rejected([{**PATCH, "format": {"type": "grammar", "syntax": "ebnf",
                                         "definition": "x"}}])
    assert err.param == "tools[0].format.syntax" and err.code == "invalid_value"
    err = rejected([{**PATCH, "format": {"type": "grammar", "syntax": "lark"}}])
    assert err.param == "tools[0].format.definition"
    assert err.code == "missing_required_parameter"


@pytest.mark.parametrize(("tools", "param", "code"), [
    ([FN, {"type": "browser"}], "tools[1].type", "invalid_value"),
    ([{"name": "f"}], "tools[0].type", "missing_required_parameter"),
    ([{"type": "function"}], "tools[0].name", "missing_required_parameter"),
    ([{"type": "custom", "name": ""}], "tools[0].name", "invalid_value"),
    ([{"type": "namespace", "name": "ns", "description": "", "tools": [{"type": "web_search"}]}],
     "tools[0].tools[0].type", "invalid_value"),
    ([{"type": "namespace", "name": "ns", "description": "", "tools": [{"type": "function"}]}],
     "tools[0].tools[0].name", "missing_required_parameter"),
    ([{"type": "namespace", "name": "ns", "tools": [FN]}], "tools[0].description",
     "missing_required_parameter"),
    ([{"type": "mcp", "server_url": "https://mcp.invalid"}], "tools[0].server_label",
     "missing_required_parameter"),
    ([{"type": "file_search"}], "tools[0].vector_store_ids", "missing_required_parameter"),
    (["web_search"], "tools[0]", "invalid_type"),
])
def test_invalid_tools_name_their_place(tools: list[Any], param: str, code: str) -> None:
    err = rejected(tools)
    assert (err.param, err.code) == (param, code)
    assert param in err.message or "Supported values" in err.message


def test_additional_tools_items_are_checked() -> None:
    item = {"type": "additional_tools", "role": "developer", "tools": [{"type": "nope"}]}
    err = rejected([], [{"type": "message", "role": "user", "content": "hi"}, item])
    assert err.param == "input[1].tools[0].type"
    err = rejected([], [{**item, "role": "user", "tools": [FN]}])
    assert err.param == "input[0].role" and err.code == "invalid_value"
    err = rejected([], [{"type": "additional_tools", "role": "developer"}])
    assert err.param == "input[0].tools" and err.code == "missing_required_parameter"
    # a tool search's output loads tools too
    loaded = {"type": "tool_search_output", "call_id": "ts_1", "tools": [FN]}
    assert [s.name for s in declared(tool_groups([], [loaded])).specs] == ["read_file"]


def turn_items() -> list[dict[str, Any]]:
    """A second turn as Codex sends it: its message, the reasoning, the calls and outputs."""
    return [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "read README.md"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "custom_tool_call", "call_id": "call_a", "name": "exec",
         "input": "await tools.exec_command({cmd: 'head -1 README.md'})",
         "namespace": "functions", "status": "completed"},
        {"type": "custom_tool_call_output", "call_id": "call_a",
         "output": [{"type": "input_text", "text": "# fastmode"}]},
        {"type": "function_call", "call_id": "call_b", "name": "sleep", "namespace": "clock",
         "arguments": "{\"duration_ms\":1}"},
        {"type": "function_call_output", "call_id": "call_b", "output": "slept"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "fastmode"}},
        {"type": "shell_call", "call_id": "call_c", "action": {"commands": ["ls"]},
         "status": "completed"},
        {"type": "shell_call_output", "call_id": "call_c",
         "output": [{"stdout": "README.md\n", "stderr": "", "outcome": {"type": "exit",
                                                                      "exit_code": 0}}]},
        {"type": "tool_search_call", "id": "ts_1", "arguments": {"query": "x"},
         "execution": "server", "status": "completed"},
        {"type": "item_reference", "id": "msg_1"},
        {"type": "additional_tools", "role": "developer", "tools": [FN]},
        {"type": "compaction_trigger"},
    ]


def test_custom_calls_and_outputs_read_as_chat_messages() -> None:
    msgs = input_messages(None, turn_items(), everyone)
    answered_calls(msgs)  # every output answers a call of the conversation
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant", "tool",
                                         "assistant", "tool"]
    assert msgs[1]["tool_calls"] == [{
        "id": "call_a", "type": "custom", "namespace": "functions",
        "custom": {"name": "exec", "input": "await tools.exec_command({cmd: 'head -1 README.md'})"}}]
    assert msgs[2] == {"role": "tool", "tool_call_id": "call_a", "content": "# fastmode"}
    assert msgs[3]["tool_calls"][0]["namespace"] == "clock"
    assert msgs[3]["tool_calls"][0]["function"]["name"] == "sleep"
    assert msgs[5]["tool_calls"][0]["function"]["name"] == "shell"
    assert "README.md" in msgs[6]["content"]
    # the custom call's input is counted as prompt, as a function call's arguments are
    bare = [m for m in msgs if m is not msgs[1]]
    assert count_chat_prompt(msgs) - count_chat_prompt(bare) > 10


@pytest.mark.parametrize(("item", "param"), [
    ({"type": "custom_tool_call", "call_id": "c", "name": "exec"}, "input[0].input"),
    ({"type": "custom_tool_call_output", "call_id": "c"}, "input[0].output"),
    ({"type": "function_call", "name": "f", "arguments": "{}"}, "input[0].call_id"),
    ({"type": "telepathy"}, "input[0].type"),
])
def test_malformed_items_are_400s(item: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as err:
        input_messages(None, [item], everyone)
    assert err.value.param == param and err.value.code is not None


def test_an_output_for_no_call_is_refused() -> None:
    msgs = input_messages(None, [{"type": "custom_tool_call_output", "call_id": "call_z",
                                  "output": "x"}], everyone)
    with pytest.raises(APIError, match="call_z"):
        answered_calls(msgs)
