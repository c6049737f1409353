"""Tools an ``additional_tools`` input item declared stay declared for a turn that continues
the conversation with ``previous_response_id`` (Codex sends them once, then only new items)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import httpx
from conftest import quick_config_text

from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config

CODEX = json.loads((Path(__file__).parent.parent / "data" / "codex_responses_request.json")
                   .read_text())


async def test_a_continued_turn_keeps_the_tools_its_conversation_declared() -> None:
    app = create_app(Config.model_validate(tomllib.loads(quick_config_text())))
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60) as c:
        body: dict[str, Any] = {**CODEX, "stream": False, "store": True}
        first = (await c.post("/v1/responses", json=body)).json()
        (call,) = [o for o in first["output"] if o["type"] == "custom_tool_call"]
        assert call["name"] == "exec" and "exec_command" in call["input"]
        output = [{"type": "input_text", "text": "Output:\nHello from the scratch README.\n"}]
        second = await c.post("/v1/responses", json={
            **body, "previous_response_id": first["id"],
            "input": [{"type": "custom_tool_call_output", "call_id": call["call_id"],
                       "output": output}]})
        assert second.status_code == 200, second.text
        (message,) = [o for o in second.json()["output"] if o["type"] == "message"]
        assert "Hello from the scratch README." in message["content"][0]["text"]
        again = await c.post("/v1/responses", json={  # a third turn, one id further on
            **body, "previous_response_id": second.json()["id"],
            "input": [{"type": "message", "role": "user", "content": "read notes.md"}]})
        (call,) = [o for o in again.json()["output"] if o["type"] == "custom_tool_call"]
        assert "cat notes.md" in call["input"]
