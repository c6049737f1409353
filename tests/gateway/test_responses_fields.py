"""The Responses API's response object carries every field OpenAI's does, with the
types the Open Responses schema requires, on every transport: non-streamed, SSE, websocket.

What the Open Responses compliance suite checks of the object: ``completed_at`` (an integer once
completed, null before: in ``response.created`` / ``response.in_progress`` events too),
``presence_penalty`` / ``frequency_penalty`` (numbers), ``top_logprobs`` (an integer),
``max_tool_calls`` / ``safety_identifier`` / ``prompt_cache_key`` (their value or null),
``background`` (a boolean), and each function tool with ``description``, ``parameters`` and
``strict`` present (null when the request left them out).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import websockets

TOOL = {"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}
ECHOED = {"presence_penalty": 0.5, "frequency_penalty": -0.25, "top_logprobs": 3,
          "max_tool_calls": 4, "safety_identifier": "user-1234",
          "prompt_cache_key": "fields-test", "truncation": "auto"}


def check_object(resp: dict[str, Any], done: bool, sent: dict[str, Any]) -> None:
    """The object's fields, as the request set them (or their defaults)."""
    if done and resp["status"] == "completed":
        assert isinstance(resp["completed_at"], int)
        assert resp["completed_at"] >= resp["created_at"]
    else:
        assert "completed_at" in resp and resp["completed_at"] is None
    assert resp["presence_penalty"] == sent.get("presence_penalty", 0.0)
    assert resp["frequency_penalty"] == sent.get("frequency_penalty", 0.0)
    assert isinstance(resp["top_logprobs"], int)
    assert resp["top_logprobs"] == sent.get("top_logprobs", 0)
    for key in ("max_tool_calls", "safety_identifier", "prompt_cache_key"):
        assert key in resp and resp[key] == sent.get(key)
    assert resp["background"] is False
    assert resp["truncation"] == sent.get("truncation", "disabled")
    for tool in resp["tools"]:
        assert {"description", "parameters", "strict"} <= tool.keys()
        assert tool["strict"] is None or isinstance(tool["strict"], bool)
    if done:
        details = resp["usage"]["input_tokens_details"]
        assert isinstance(details["cache_write_tokens"], int)


def test_non_streamed_object_has_every_field(quick_server: str) -> None:
    body = {"model": "frontier", "input": "hi", "max_output_tokens": 8, "tools": [TOOL],
            "tool_choice": "none", **ECHOED}
    resp = httpx.post(quick_server + "/v1/responses", json=body, timeout=30).json()
    check_object(resp, True, ECHOED)
    assert resp["tools"][0]["strict"] is None and resp["tools"][0]["description"] is None
    plain = httpx.post(quick_server + "/v1/responses", timeout=30, json={
        "model": "frontier", "input": "hi",
        "tools": [{**TOOL, "strict": False, "description": "Weather"}]}).json()
    check_object(plain, True, {})
    assert plain["tools"][0]["strict"] is False
    assert plain["tools"][0]["description"] == "Weather"


def test_sse_events_carry_the_fields(quick_server: str) -> None:
    body = {"model": "frontier", "input": "hi", "stream": True, **ECHOED}
    with httpx.stream("POST", quick_server + "/v1/responses", json=body, timeout=30) as answer:
        events = [json.loads(line[6:]) for line in answer.iter_lines()
                  if line.startswith("data: ")]
    client = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")
    with client.responses.create(model="frontier", input="hi", stream=True,
                                 extra_body=ECHOED) as stream:
        assert [e.type for e in stream][-1] == "response.completed"  # the SDK parses them
    first, last = events[0], events[-1]
    assert first["type"] == "response.created"
    check_object(first["response"], False, ECHOED)
    assert last["type"] == "response.completed"
    check_object(last["response"], True, ECHOED)


async def test_websocket_events_carry_the_fields(quick_server: str) -> None:
    url = quick_server.replace("http://", "ws://") + "/v1/responses"
    async with websockets.connect(url, compression=None) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                  "input": "hi", "store": False}))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "error"):
            events.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
    assert events[0]["type"] == "response.created"
    check_object(events[0]["response"], False, {})
    assert events[1]["type"] == "response.in_progress"
    check_object(events[1]["response"], False, {})
    check_object(events[-1]["response"], True, {})
