"""Coding agents' Responses requests against a real server, read by the official openai SDK.

Codex CLI's own first request (``tests/data/codex_responses_request.json``: tools in an
``additional_tools`` item, namespaced, a custom ``exec`` tool with a Lark grammar) and the
``tools[]`` its older models send; custom tool calls out (``custom_tool_call`` items and their
``response.custom_tool_call_input.*`` events) and back in (``custom_tool_call_output``); the
warm-up ``generate: false``; and the websocket's errors carrying HTTP's codes.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import websockets

from fastmode.gateway.protocols.openai_responses.tools import HOSTED_REQUIRED

CODEX = json.loads((Path(__file__).parent.parent / "data" / "codex_responses_request.json")
                   .read_text())
MODEL = "gpt-5.4"  # a model id the built-in config routes (Codex's default is gpt-6.2-sol)
FN = {"type": "function", "name": "read_file", "description": "Read a file from disk",
      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                     "required": ["path"]}}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to files",
         "format": {"type": "text"}}
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "sub-agents",
             "tools": [{"type": "function", "name": "spawn_agent", "description": "Spawn",
                        "parameters": {"type": "object", "properties": {}}}]}
HOSTED = [{"type": "web_search"}, {"type": "tool_search"}, {"type": "web_search_preview"},
          {"type": "image_generation"}, {"type": "local_shell"}, {"type": "shell"},
          {"type": "apply_patch"}, {"type": "code_interpreter", "container": {"type": "auto"}},
          {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.invalid"}]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def codex_body(**over: Any) -> dict[str, Any]:
    body = copy.deepcopy(CODEX)
    body.update(model=MODEL, **over)
    return body


def sdk_args(body: dict[str, Any]) -> dict[str, Any]:
    """The body as the SDK's keyword arguments: fields it does not know go in ``extra_body``
    (Codex sends ``client_metadata``, ``reasoning.context``, ``text.verbosity``...)."""
    known = inspect.signature(openai.resources.responses.Responses.create).parameters
    args = {k: v for k, v in body.items() if k in known and k != "stream"}
    args["extra_body"] = {k: v for k, v in body.items() if k not in known}
    return args


def post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/v1/responses", json=body, timeout=60,
                      headers={"authorization": "Bearer x"})


def test_codex_first_request_streams_a_namespaced_custom_call(quick_server: str) -> None:
    events = list(client(quick_server).responses.create(**sdk_args(codex_body()), stream=True))
    kinds = [e.type for e in events]
    assert kinds[-1] == "response.completed"
    final = events[-1].response
    call = final.output[-1]
    assert call.type == "custom_tool_call"  # parsed by the SDK as ResponseCustomToolCall
    assert (call.name, call.namespace) == ("exec", "functions")
    assert call.call_id.startswith("call_") and call.id.startswith("ctc_")
    deltas = [e for e in events if e.type == "response.custom_tool_call_input.delta"]
    done = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert deltas and len(done) == 1
    assert "".join(d.delta for d in deltas) == done[0].input == call.input != ""
    assert {d.item_id for d in deltas} == {done[0].item_id, call.id}
    added = [e for e in events if e.type == "response.output_item.added"
             and e.item.type == "custom_tool_call"]
    assert added[0].item.input == "" and added[0].item.namespace == "functions"
    assert "response.function_call_arguments.delta" not in kinds
    # reasoning was asked for encrypted (Codex's include): there to send back
    assert final.output[0].type == "reasoning" and final.output[0].encrypted_content


def test_a_custom_call_answered_on_the_next_turn(quick_server: str) -> None:
    first = post(quick_server, codex_body(stream=False)).json()
    call = first["output"][-1]
    assert call["type"] == "custom_tool_call" and call["status"] == "completed"
    result = "# fastmode: a mock LLM gateway"
    body = codex_body(stream=False)
    body["input"] += [*first["output"], {"type": "custom_tool_call_output",
                                         "call_id": call["call_id"], "output": result}]
    second = client(quick_server).responses.create(**sdk_args(body))
    assert second.status == "completed"
    message = second.output[-1]
    assert message.type == "message" and message.content[0].text
    assert second.usage.input_tokens > first["usage"]["input_tokens"]


def test_older_models_tools_array(quick_server: str) -> None:
    """What Codex sends for gpt-5.x: function, namespace, custom and hosted tools in tools[]."""
    api = client(quick_server)
    tools = [FN, NAMESPACE, PATCH, *HOSTED]
    forced = api.responses.create(model=MODEL, input="apply the fix to main.py", tools=tools,
                                  tool_choice={"type": "custom", "name": "apply_patch"})
    call = forced.output[-1]
    assert call.type == "custom_tool_call" and call.name == "apply_patch"
    assert call.namespace is None and call.input
    assert [t.type for t in forced.tools] == [t["type"] for t in tools]  # echoed as sent
    spawned = api.responses.create(model=MODEL, input="start a helper", tools=tools,
                                   tool_choice={"type": "function", "name": "spawn_agent"})
    fc = spawned.output[-1]
    assert fc.type == "function_call" and (fc.name, fc.namespace) == (
        "spawn_agent", "multi_agent_v1")
    assert isinstance(json.loads(fc.arguments), dict)


def test_hosted_tools_alone_are_never_called(quick_server: str) -> None:
    every = [{"type": k, **({"server_label": "x"} if k == "mcp" else {}),
              **({"container": "cntr_1"} if k == "code_interpreter" else {}),
              **({"vector_store_ids": ["vs_1"]} if k == "file_search" else {}),
              **({"display_height": 1, "display_width": 1, "environment": "linux"}
                 if k == "computer_use_preview" else {})} for k in HOSTED_REQUIRED]
    for seed in range(3):
        resp = client(quick_server).responses.create(
            model=MODEL, input="search the web for fastmode", tools=every, extra_body={"seed": seed},
            max_output_tokens=300)
        assert [o.type for o in resp.output if o.type != "reasoning"] == ["message"]


@pytest.mark.parametrize(("tools", "param", "code"), [
    ([FN, {"type": "teleport"}], "tools[1].type", "invalid_value"),
    ([{"type": "custom"}], "tools[0].name", "missing_required_parameter"),
    ([{"type": "namespace", "name": "n", "description": "", "tools": [{"type": "function"}]}],
     "tools[0].tools[0].name", "missing_required_parameter"),
])
def test_invalid_tools_are_openai_400s(quick_server: str, tools: list[Any], param: str,
                                       code: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(quick_server).responses.create(model=MODEL, input="hi", tools=tools)
    assert err.value.body["param"] == param and err.value.body["code"] == code


def unique_prompt() -> str:
    return f"Warm-up {uuid.uuid4().hex}: " + "the fast brown fox jumps over the lazy dog. " * 200


def test_generate_false_warms_the_prefix_and_bills_input_only(quick_server: str) -> None:
    text = unique_prompt()
    body = {"model": MODEL, "input": text, "store": False, "reasoning": {"effort": "medium"}}
    warm = post(quick_server, {**body, "generate": False})
    assert warm.status_code == 200
    resp = warm.json()
    usage = resp["usage"]
    assert resp["status"] == "completed" and resp["output"] == []
    assert usage["output_tokens"] == 0 and usage["output_tokens_details"]["reasoning_tokens"] == 0
    assert usage["total_tokens"] == usage["input_tokens"] > 1000
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    after = post(quick_server, {**body, "max_output_tokens": 64}).json()
    assert after["usage"]["input_tokens_details"]["cached_tokens"] > usage["input_tokens"] // 2
    assert after["output"] and after["usage"]["output_tokens"] > 0
    # input only: what the same prompt's input costs uncached (the price of a token of input
    # from two generating requests on fresh prompts of about the same length, 16 and 48 tokens out)
    runs = [post(quick_server, {"model": MODEL, "input": unique_prompt(), "store": False,
                                "max_output_tokens": cap, "ignore_eos": True,
                                "reasoning": {"effort": "none"}}).json()["usage"]
            for cap in (16, 48)]
    assert [r["output_tokens"] for r in runs] == [16, 48]
    (c0, i0), (c1, i1) = ((r["cost_usd"], r["input_tokens"]) for r in runs)
    per_input = (c0 * 48 - c1 * 16) / (i0 * 48 - i1 * 16)  # cost = in x p_in + out x p_out
    per_output = (c0 - per_input * i0) / 16
    assert per_input > 0 and per_output > per_input
    assert usage["cost_usd"] == pytest.approx(per_input * usage["input_tokens"], rel=1e-3)
    streamed = list(client(quick_server).responses.create(
        model=MODEL, input=unique_prompt(), stream=True, extra_body={"generate": False}))
    assert [e.type for e in streamed] == ["response.created", "response.in_progress",
                                          "response.completed"]
    assert streamed[-1].response.output == [] and streamed[-1].response.usage.output_tokens == 0


async def ws_turn(ws: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    await ws.send(json.dumps({"type": "response.create", **body}))
    events = []
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), 60))
        events.append(ev)
        if ev["type"] in ("response.completed", "response.failed", "error"):
            return events


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/v1/responses"


def test_websocket_codex_session(quick_server: str) -> None:
    """Codex's websocket session: a warm-up frame, then the turn, on one connection."""
    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with websockets.connect(ws_url(quick_server), compression=None) as ws:
            body = codex_body()
            body.pop("stream")
            warm = await ws_turn(ws, {**body, "generate": False})
            turn = await ws_turn(ws, body)
            return warm, turn
    warm, turn = asyncio.run(run())
    assert [e["type"] for e in warm] == ["response.created", "response.in_progress",
                                         "response.completed"]
    assert warm[-1]["response"]["output"] == []
    assert warm[-1]["response"]["usage"]["output_tokens"] == 0
    done = turn[-1]["response"]
    assert turn[-1]["type"] == "response.completed"
    assert done["usage"]["input_tokens_details"]["cached_tokens"] > 0  # the warm-up's prefix
    call = done["output"][-1]
    assert call["type"] == "custom_tool_call" and call["namespace"] == "functions"
    kinds = [e["type"] for e in turn]
    assert "response.custom_tool_call_input.delta" in kinds
    assert "response.custom_tool_call_input.done" in kinds


BAD_BODIES = [
    {"model": MODEL, "input": [{"type": "telepathy"}]},
    {"model": MODEL, "input": [{"type": "message", "role": "robot", "content": "hi"}]},
    {"model": MODEL, "input": [{"type": "additional_tools", "role": "user", "tools": []}]},
    {"model": MODEL, "input": "hi", "tools": [{"type": "teleport"}]},
    {"model": MODEL, "input": "hi", "tools": [FN], "tool_choice": {"type": "function",
                                                                   "name": "nope"}},
    {"model": MODEL, "input": "hi", "max_output_tokens": "many"},
]


def test_websocket_errors_carry_http_codes(quick_server: str) -> None:
    http = [post(quick_server, b).json()["error"] for b in BAD_BODIES]

    async def run() -> list[dict[str, Any]]:
        async with websockets.connect(ws_url(quick_server), compression=None) as ws:
            return [(await ws_turn(ws, b))[-1] for b in BAD_BODIES]
    ws = asyncio.run(run())
    for h, w in zip(http, ws, strict=True):
        assert w["type"] == "error" and w["status"] == 400
        assert w["error"]["code"] == h["code"] is not None
        assert w["error"]["param"] == h["param"]


def test_custom_and_namespaced_calls_through_a_remote_tier(quick_server: str,
                                                           server_factory: Any) -> None:
    """A remote tier (``--upstream``: here a fastmode server speaking Chat) keeps a custom
    call a custom call, and a namespaced call in its namespace, both ways."""
    gw = server_factory("--upstream", quick_server)
    api = client(gw)
    tools = [FN, NAMESPACE, PATCH, {"type": "web_search"}]
    custom = api.responses.create(model=MODEL, input="apply the fix to main.py", tools=tools,
                                  tool_choice={"type": "custom", "name": "apply_patch"})
    call = custom.output[-1]
    assert call.type == "custom_tool_call" and call.name == "apply_patch" and call.input
    events = list(api.responses.create(model=MODEL, input="start a helper", tools=tools,
                                       stream=True, tool_choice={"type": "function",
                                                                 "name": "spawn_agent"}))
    fc = events[-1].response.output[-1]
    assert fc.type == "function_call" and fc.namespace == "multi_agent_v1"
    answered = api.responses.create(model=MODEL, tools=tools, input=[
        {"type": "message", "role": "user", "content": "apply the fix"},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "apply_patch",
         "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done."}])
    assert answered.output[-1].type == "message" and answered.output[-1].content[0].text
    # a warm-up completes at the gateway: no output, input billed only, streamed or not
    warm = post(gw, {"model": MODEL, "input": "hi", "generate": False}).json()
    assert warm["status"] == "completed" and warm["output"] == []
    assert warm["usage"]["output_tokens"] == 0 and warm["usage"]["input_tokens"] > 0
    streamed = list(api.responses.create(model=MODEL, input="hi", stream=True,
                                         extra_body={"generate": False}))
    assert streamed[-1].type == "response.completed"
    assert streamed[-1].response.output == [] and streamed[-1].response.usage.output_tokens == 0
