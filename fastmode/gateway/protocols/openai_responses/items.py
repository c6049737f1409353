"""Responses input items as the chat messages the tokenizer and the mock model read.

Shared by ``POST /v1/responses`` (SSE and websocket) and ``POST /v1/responses/compact``:
messages, function and custom tool calls and their outputs (a custom call in Chat's
``custom`` shape, a namespace kept on the call), hosted tools' calls and outputs a client runs
(shells, apply_patch, computer) and MCP calls, reasoning items sent back (checked to be ours),
images (checked, never fetched: ``gateway.protocols.images``) and compaction items (the
summary a compaction made, checked to be ours and of the caller's key). Every other item type
the API defines is accepted and is no text for the model (``SKIPPED``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.protocols.images import check_images
from fastmode.gateway.protocols.sealed import compaction_payload, reasoning_is_ours

if TYPE_CHECKING:
    from fastmode.gateway.stored.response_store import ResponseStore, StoredResponse

ROLES = ("user", "assistant", "system", "developer")
# hosted tools' calls a client sends back: the tool name they stand for, and their arguments
HOSTED_CALLS = {
    "local_shell_call": ("local_shell", "action"),
    "shell_call": ("shell", "action"),
    "apply_patch_call": ("apply_patch", "operation"),
    "computer_call": ("computer", "action"),
    "mcp_call": ("mcp", "arguments"),
}
HOSTED_OUTPUTS = ("local_shell_call_output", "shell_call_output", "apply_patch_call_output",
                  "computer_call_output")
# items the API defines that are no text for the model: tool declarations (read by
# ``tools.tool_groups``), server-side tools' records, approvals, configuration and markers
SKIPPED = ("item_reference", "additional_tools", "tool_search_call", "tool_search_output",
           "web_search_call", "file_search_call", "image_generation_call",
           "code_interpreter_call", "mcp_list_tools", "mcp_approval_request",
           "mcp_approval_response", "configuration_update", "compaction_trigger", "program",
           "program_output")
# an expanded compaction item's tool calls that later outputs may still answer (internal key:
# the tokenizer and the mock model read only the chat fields)
COMPACTED_CALLS = "compacted_calls"


def input_messages(instructions: str | None, items: str | list[dict[str, Any]],
                   may_see: Callable[[str | None], bool]) -> list[dict[str, Any]]:
    """``instructions`` and the input ``items`` as chat messages; ``may_see`` says whether the
    caller may use a compaction made by a key (by its id)."""
    msgs: list[dict[str, Any]] = []
    if instructions:
        msgs.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        msgs.append({"role": "user", "content": items})
        return msgs
    check_images(items, "input")
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message" or ("role" in item and "type" not in item):
            role = item.get("role")
            if role not in ROLES:
                raise bad_request(
                    f"Invalid value for 'input[{i}].role': {role!r}.", param=f"input[{i}].role",
                    code="invalid_value")
            msgs.append({"role": role, "content": item.get("content")})
        elif kind in ("function_call", "custom_tool_call"):
            msgs.append(called(item, i))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            _need(item, i, "call_id", "output")
            msgs.append({"role": "tool", "tool_call_id": item["call_id"],
                         "content": output_text(item["output"])})
        elif kind in HOSTED_CALLS:
            msgs += _hosted_call(item, kind)
        elif kind in HOSTED_OUTPUTS:
            msgs += _hosted_output(item, msgs)
        elif kind == "reasoning":
            # a reasoning item sent back: accepted when it is one of ours (its encrypted content
            # unaltered); earlier turns' reasoning is not part of the model's context
            if item.get("encrypted_content") is not None and not reasoning_is_ours(item):
                raise _unverified(i)
            continue
        elif kind == "compaction":
            msgs.append(_compacted(item, i, may_see))
        elif kind in SKIPPED:
            continue
        else:
            raise bad_request(
                f"Invalid value for 'input[{i}].type': {kind!r} is not supported.",
                param=f"input[{i}].type", code="invalid_value")
    return msgs


def called(item: dict[str, Any], i: int) -> dict[str, Any]:
    """A function or custom tool call sent back, as the assistant message that made it (a
    custom call in Chat's shape: ``custom: {name, input}``; its namespace kept)."""
    if item["type"] == "custom_tool_call":
        _need(item, i, "call_id", "name", "input")
        call: dict[str, Any] = {"id": item["call_id"], "type": "custom",
                                "custom": {"name": item["name"], "input": item["input"]}}
    else:
        _need(item, i, "call_id", "name", "arguments")
        call = {"id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]}}
    if item.get("namespace"):
        call["namespace"] = item["namespace"]
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def output_text(out: Any) -> str:
    """A tool output as the text the model reads: a string, or the text of its content parts
    (an image or a file part counts as its JSON)."""
    if isinstance(out, str):
        return out
    if isinstance(out, list) and all(isinstance(p, dict) for p in out):
        return "\n".join(str(p["text"]) if isinstance(p.get("text"), str)
                         else orjson.dumps(p).decode() for p in out)
    return orjson.dumps(out).decode()


def _need(item: dict[str, Any], i: int, *fields: str) -> None:
    for name in fields:
        if item.get(name) is None:
            raise APIError(400, f"Missing required parameter: 'input[{i}].{name}'.",
                           param=f"input[{i}].{name}", code="missing_required_parameter")


def _hosted_call(item: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """A hosted tool's call sent back (a shell, apply_patch, computer or MCP call): the
    assistant's call, and for an MCP call (run on the server) its output after it."""
    name, field = HOSTED_CALLS[kind]
    cid = str(item.get("call_id") or item.get("id") or "")
    args = item.get(field)
    call = {"id": cid, "type": "function", "function": {
        "name": str(item.get("name") or name),
        "arguments": args if isinstance(args, str) else orjson.dumps(args).decode()}}
    out = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    if kind == "mcp_call" and item.get("output") is not None:
        out.append({"role": "tool", "tool_call_id": cid, "content": str(item["output"])})
    return out


def _hosted_output(item: dict[str, Any], msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A hosted tool's output: the tool result of the call it answers, when that call is in the
    conversation (else nothing: it answered a call of a response the client did not resend)."""
    cid = str(item.get("call_id") or item.get("id") or "")
    if cid not in {str(c.get("id")) for m in msgs for c in m.get("tool_calls") or ()}:
        return []
    out = item.get("output")
    text = output_text(out) if out is not None else str(item.get("status") or "")
    return [{"role": "tool", "tool_call_id": cid, "content": text}]


def _unverified(i: int) -> APIError:
    return bad_request(f"The encrypted content for item input[{i}] could not be verified.",
                       param=f"input[{i}].encrypted_content", code="invalid_encrypted_content")


def _compacted(item: dict[str, Any], i: int,
               may_see: Callable[[str | None], bool]) -> dict[str, Any]:
    """A compaction item: the summary it carries stands for the items it compacted (their
    tokens are the summary's: that is what compaction saves)."""
    payload = compaction_payload(item)
    if payload is None or not may_see(payload.get("o")):
        raise _unverified(i)
    return {"role": "assistant", "content": str(payload.get("t") or ""),
            COMPACTED_CALLS: [str(c) for c in payload.get("c") or ()]}


def continued(store: ResponseStore, rid: str) -> StoredResponse:
    """The stored response a ``previous_response_id`` continues (loaded by the pipeline)."""
    prev = store.get(rid)
    if prev is None:
        raise APIError(400, f"Previous response with id '{rid}' not found.",
                       param="previous_response_id", code="previous_response_not_found")
    body = prev.body.get("response") if isinstance(prev.body, dict) else None
    if isinstance(body, dict) and body.get("status") in ("queued", "in_progress"):
        raise bad_request(f"Previous response with id '{rid}' is still {body['status']} (a "
                          "background response): continue it once it has completed.",
                          param="previous_response_id")
    return prev


def answered_calls(messages: list[dict[str, Any]]) -> None:
    """Each tool output answers a call made earlier in the conversation (the request's items or
    the continued response's); an output for no call is OpenAI's 400."""
    calls: set[str] = set()
    for m in messages:
        calls.update(str(c.get("id")) for c in m.get("tool_calls") or ())
        calls.update(m.get(COMPACTED_CALLS) or ())
        if m.get("role") == "tool" and m.get("tool_call_id") not in calls:
            raise bad_request("No tool call found for function call output with call_id "
                              f"{m.get('tool_call_id')}.", param="input")


def pending_calls(messages: list[dict[str, Any]]) -> list[str]:
    """The tool calls of ``messages`` no output has answered yet (a compaction keeps them)."""
    calls: list[str] = []
    for m in messages:
        calls += [str(c.get("id")) for c in m.get("tool_calls") or ()]
        calls += m.get(COMPACTED_CALLS) or []
        if m.get("role") == "tool" and m.get("tool_call_id") in calls:
            calls.remove(m["tool_call_id"])
    return calls
