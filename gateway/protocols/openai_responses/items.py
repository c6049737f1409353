"""Responses input items as the chat messages the tokenizer and the mock model read.

Shared by ``POST /v1/responses`` (SSE and websocket) and ``POST /v1/responses/compact``:
messages, function calls and their outputs, reasoning items sent back (checked to be ours),
images (checked, never fetched: ``gateway.protocols.images``) and compaction items (the
summary a compaction made, checked to be ours and of the caller's key).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from ...errors import APIError, bad_request
from ..images import check_images
from ..sealed import compaction_payload, reasoning_is_ours

if TYPE_CHECKING:
    from ...stored.response_store import ResponseStore, StoredResponse

ROLES = ("user", "assistant", "system", "developer")
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
                    f"Invalid value for 'input[{i}].role': {role!r}.", param=f"input[{i}].role"
                )
            msgs.append({"role": role, "content": item.get("content")})
        elif kind == "function_call":
            msgs.append({
                "role": "assistant",
                "content": None,
                "tool_calls": [{
                    "id": item.get("call_id", ""),
                    "type": "function",
                    "function": {"name": item.get("name", ""),
                                 "arguments": item.get("arguments", "")},
                }],
            })
        elif kind == "function_call_output":
            out = item.get("output", "")
            msgs.append({
                "role": "tool",
                "tool_call_id": item.get("call_id", ""),
                "content": out if isinstance(out, str) else orjson.dumps(out).decode(),
            })
        elif kind == "reasoning":
            # a reasoning item sent back: accepted when it is one of ours (its encrypted content
            # unaltered); earlier turns' reasoning is not part of the model's context
            if item.get("encrypted_content") is not None and not reasoning_is_ours(item):
                raise _unverified(i)
            continue
        elif kind == "compaction":
            msgs.append(_compacted(item, i, may_see))
        elif kind == "item_reference":
            continue
        else:
            raise bad_request(
                f"Invalid value for 'input[{i}].type': {kind!r} is not supported.",
                param=f"input[{i}].type",
            )
    return msgs


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
