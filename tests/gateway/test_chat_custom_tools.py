"""Chat Completions' custom tools against a real server, read by the official openai SDK.

A custom tool (``{"type": "custom", "custom": {"name", "description", "format"}}``) is called
with a ``custom`` tool call (``custom: {name, input}``: freeform text, no JSON), streamed as
``tool_calls`` deltas of that shape; a call sent back with its result is answered in text.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

PATCH = {"type": "custom", "custom": {
    "name": "apply_patch", "description": "Apply a patch to the files named in the task",
    "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /.+/s"}}}}
READ = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}
ASK = [{"role": "user", "content": "fix the typo in main.py"}]
FORCED = {"type": "custom", "custom": {"name": "apply_patch"}}


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def test_a_custom_call_non_streamed_and_answered(quick_server: str) -> None:
    api = client(quick_server)
    resp = api.chat.completions.create(model="gpt-5.4", messages=ASK, tools=[READ, PATCH],
                                       tool_choice=FORCED)
    assert resp.choices[0].finish_reason == "tool_calls"
    call = resp.choices[0].message.tool_calls[0]
    assert call.type == "custom"  # parsed as ChatCompletionMessageCustomToolCall
    assert call.custom.name == "apply_patch" and call.custom.input
    assert not hasattr(call, "function")
    history: list[Any] = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "custom",
         "custom": {"name": call.custom.name, "input": call.custom.input}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "Done: 1 file changed."}]
    answer = api.chat.completions.create(model="gpt-5.4", messages=history,
                                         tools=[READ, PATCH])
    assert answer.choices[0].finish_reason == "stop" and answer.choices[0].message.content
    # the custom call's input was part of the prompt
    assert answer.usage.prompt_tokens > resp.usage.prompt_tokens


def test_a_custom_call_streamed_in_custom_deltas(quick_server: str) -> None:
    chunks = list(client(quick_server).chat.completions.create(
        model="gpt-5.4", messages=ASK, tools=[PATCH], tool_choice=FORCED, stream=True))
    deltas = [tc.model_dump() for c in chunks if c.choices
              for tc in c.choices[0].delta.tool_calls or ()]
    assert deltas[0]["type"] == "custom" and deltas[0]["id"].startswith("call_")
    assert deltas[0]["custom"]["name"] == "apply_patch"
    assert all(d["index"] == 0 and d.get("function") is None for d in deltas)
    text = "".join(d["custom"]["input"] for d in deltas)
    whole = client(quick_server).chat.completions.create(
        model="gpt-5.4", messages=ASK, tools=[PATCH], tool_choice=FORCED)
    assert text == whole.choices[0].message.tool_calls[0].custom.input
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(("tool", "param", "code"), [
    ({"type": "custom", "custom": {"description": "x"}}, "tools[0].custom.name",
     "missing_required_parameter"),
    ({"type": "custom", "custom": {"name": "p", "format": {"type": "grammar", "grammar": {
        "syntax": "peg", "definition": "x"}}}}, "tools[0].custom.format.grammar.syntax",
     "invalid_value"),
    ({"type": "custom", "custom": {"name": "p", "format": {"type": "json"}}},
     "tools[0].custom.format.type", "invalid_value"),
    ({"type": "browser"}, "tools[0].type", "invalid_value"),
    ({"type": "function", "function": {}}, "tools[0].function.name",
     "missing_required_parameter"),
])
def test_invalid_tools_are_400s_naming_their_place(quick_server: str, tool: dict[str, Any],
                                                  param: str, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(quick_server).chat.completions.create(model="gpt-5.4", messages=ASK,
                                                     tools=[tool])
    assert (err.value.body["param"], err.value.body["code"]) == (param, code)


def test_forcing_an_unknown_custom_tool_is_a_400(quick_server: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(quick_server).chat.completions.create(
            model="gpt-5.4", messages=ASK, tools=[READ],
            tool_choice={"type": "custom", "custom": {"name": "apply_patch"}})
    assert err.value.body["param"] == "tool_choice"
