"""Websocket continuations that fail, as the Open Responses suite checks them.

A continuation that fails (here: a tool output for a call the continued response never made,
OpenAI's 400) evicts the response it continued from the connection's memory: continuing it
again is ``previous_response_not_found`` — unless it was stored, when the shared store still
has it. A ``store: false`` response is the connection's alone: after a reconnect it is
``previous_response_not_found``, and a fresh response on the new connection runs.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import websockets

TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}
ORPHAN = [{"type": "function_call_output", "call_id": "call_nobody_made", "output": "x"}]


async def turn(ws, **body: Any) -> dict[str, Any]:
    """One response.create; its terminal event."""
    await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                              "max_output_tokens": 8, **body}))
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if event["type"] in TERMINAL:
            return event


def url(base: str) -> str:
    return base.replace("http://", "ws://") + "/v1/responses"


async def test_a_failed_continuation_evicts_what_it_continued(quick_server: str) -> None:
    async with websockets.connect(url(quick_server), compression=None) as ws:
        first = await turn(ws, store=False, input="Remember: ember.")
        rid = first["response"]["id"]
        ok = await turn(ws, store=False, previous_response_id=rid, input="and?")
        assert ok["type"] != "error"  # it continues while nothing failed
        failed = await turn(ws, store=False, previous_response_id=rid, input=ORPHAN)
        assert failed["type"] == "error" and failed["status"] == 400
        assert failed["error"]["param"] == "input"
        retry = await turn(ws, store=False, previous_response_id=rid, input="again?")
        assert retry["type"] == "error"
        assert retry["error"]["code"] == "previous_response_not_found"


async def test_a_stored_response_survives_a_failed_continuation(quick_server: str) -> None:
    async with websockets.connect(url(quick_server), compression=None) as ws:
        first = await turn(ws, input="Remember: cobalt.")
        rid = first["response"]["id"]
        failed = await turn(ws, previous_response_id=rid, input=ORPHAN)
        assert failed["type"] == "error"
        retry = await turn(ws, previous_response_id=rid, input="again?")
        assert retry["type"] in ("response.completed", "response.incomplete")


async def test_store_false_does_not_survive_a_reconnect(quick_server: str) -> None:
    async with websockets.connect(url(quick_server), compression=None) as ws:
        first = await turn(ws, store=False, input="Remember: copper.")
    async with websockets.connect(url(quick_server), compression=None) as ws:
        lost = await turn(ws, store=False, previous_response_id=first["response"]["id"],
                          input="Continue?")
        assert lost["type"] == "error"
        assert lost["error"]["code"] == "previous_response_not_found"
        fresh = await turn(ws, store=False, input=[{"type": "message", "role": "user",
                                                   "content": "Start over."}])
        assert fresh["type"] in ("response.completed", "response.incomplete")
