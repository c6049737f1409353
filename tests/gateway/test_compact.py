"""``POST /v1/responses/compact``: what the Open Responses suite and the SDK check.

A compaction answers ``object: "response.compaction"`` with the compacted window (the user
messages, then one ``compaction`` item); a later request takes the window as input over HTTP
and the websocket, and pays the summary's tokens instead of the compacted items'. The pass is
a turn on the engine (usage: the conversation in, the summary out); a tampered item, another
key's item, or a request without ``model`` is a 400.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import websockets
from conftest import launch, quick_config_text, stop_server

from fastmode.gateway.protocols.openai_responses.compact import summary_tokens

KEY_A = "sk-compact-a-5d1e9c7b3a2f48605d1e9c7b3a2f4860"
KEY_B = "sk-compact-b-8f2a6c4e0b9d17358f2a6c4e0b9d1735"
LONG = ("The launch moves to Tuesday; support is told first, then the partners, then the "
        "press. The runbook lives in the ops wiki and the on-call rotation starts Monday. ") * 12
CONVERSATION = [
    {"type": "message", "role": "user", "content": "When do we launch?"},
    {"type": "message", "role": "assistant", "content": LONG},
    {"type": "message", "role": "user",
     "content": [{"type": "input_text", "text": "Who is told first?"}]},
    {"type": "message", "role": "assistant", "content": LONG},
]
NEXT = {"type": "message", "role": "user", "content": "Summarise the plan in a line."}


def sdk(base: str, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)


def compact(base: str, key: str = "x", **body: Any) -> dict[str, Any]:
    """The raw compaction (the SDK types the window's user messages as assistant output)."""
    answer = httpx.post(base + "/v1/responses/compact", json=body, timeout=30,
                        headers={"authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_compaction_is_the_user_messages_then_one_sealed_item(quick_server: str) -> None:
    client = sdk(quick_server)
    body = compact(quick_server, model="frontier", input=CONVERSATION)
    assert body["object"] == "response.compaction"
    assert [item["type"] for item in body["output"]] == ["message", "message", "compaction"]
    assert client.responses.compact(model="frontier", input=CONVERSATION).output[-1].type \
        == "compaction"  # what the SDK parses
    users = body["output"][:2]
    assert [u["role"] for u in users] == ["user", "user"]
    assert users[0]["content"] == [{"type": "input_text", "text": "When do we launch?"}]
    assert users[1]["content"] == [{"type": "input_text", "text": "Who is told first?"}]
    assert body["output"][2]["encrypted_content"]
    # the pass is a turn: the conversation in (what a response to it would bill), the
    # summary out, as long as the compaction rule says for the two assistant messages
    plain = client.responses.create(model="frontier", input=CONVERSATION, max_output_tokens=16)
    usage = body["usage"]
    assert usage["input_tokens"] == plain.usage.input_tokens
    compacted_items = [{"role": "assistant", "content": LONG}] * 2
    assert usage["output_tokens"] == summary_tokens(compacted_items)
    assert usage["output_tokens"] < plain.usage.input_tokens


def test_the_window_continues_a_conversation_for_fewer_tokens(quick_server: str) -> None:
    client = sdk(quick_server)
    window = compact(quick_server, model="frontier", input=CONVERSATION)["output"]
    after = client.responses.create(model="frontier", input=[*window, NEXT],
                                    max_output_tokens=16)
    before = client.responses.create(model="frontier", input=[*CONVERSATION, NEXT],
                                     max_output_tokens=16)
    assert after.status in ("completed", "incomplete")
    assert after.usage.input_tokens < before.usage.input_tokens


async def test_the_window_starts_a_new_chain_on_the_websocket(quick_server: str) -> None:
    compacted = compact(quick_server, model="frontier", input=CONVERSATION)
    url = quick_server.replace("http://", "ws://") + "/v1/responses"
    async with websockets.connect(url, compression=None) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                  "store": False, "tools": [],
                                  "input": [*compacted["output"], NEXT]}))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in ("response.completed", "error"):
            events.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
    assert events[-1]["type"] == "response.completed"


def test_a_tampered_item_and_a_missing_model_are_400s(quick_server: str) -> None:
    client = sdk(quick_server)
    window = compact(quick_server, model="frontier", input=CONVERSATION)["output"]
    item = dict(window[-1])
    head, body, tag = item["encrypted_content"].split(".")
    item["encrypted_content"] = ".".join([head, body[:-2] + "AA", tag])
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="frontier", input=[*window[:-1], item, NEXT])
    assert bad.value.code == "invalid_encrypted_content"
    missing = httpx.post(quick_server + "/v1/responses/compact", json={"input": "hi"})
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == "missing_required_parameter"
    assert missing.json()["error"]["param"] == "model"


def test_compaction_keeps_the_calls_still_waiting_for_their_output(quick_server: str) -> None:
    client = sdk(quick_server)
    call = {"type": "function_call", "call_id": "call_pending_1", "name": "get_weather",
            "arguments": '{"city": "Lyon"}'}
    window = compact(quick_server, model="frontier", input=[CONVERSATION[0], call])["output"]
    output = {"type": "function_call_output", "call_id": "call_pending_1", "output": "sunny"}
    answered = client.responses.create(model="frontier", input=[*window, output],
                                       max_output_tokens=8)
    assert answered.status in ("completed", "incomplete")
    with pytest.raises(openai.BadRequestError) as orphan:
        client.responses.create(model="frontier", input=[
            *window, {**output, "call_id": "call_nobody_made"}], max_output_tokens=8)
    assert orphan.value.param == "input"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory):
    """A gateway with auth on and two keys."""
    tmp: Path = tmp_path_factory.mktemp("compact-auth")
    text = quick_config_text()
    auth = text.index("[auth]\nenabled = false")
    end = text.index("\n", auth + len("[auth]\n"))
    text = (text[:auth] + f'[auth]\nenabled = true\n[[auth.keys]]\nkey = "{KEY_A}"\n'
            f'[[auth.keys]]\nkey = "{KEY_B}"\n' + text[end + 1:])
    proc, url = launch(config_text=text, tmp=tmp)
    try:
        yield url
    finally:
        stop_server(proc)


def test_a_compaction_is_its_keys_alone(keyed: str) -> None:
    a, b = sdk(keyed, KEY_A), sdk(keyed, KEY_B)
    window = compact(keyed, KEY_A, model="frontier", input=CONVERSATION)["output"]
    mine = a.responses.create(model="frontier", input=[*window, NEXT], max_output_tokens=8)
    assert mine.status in ("completed", "incomplete")
    with pytest.raises(openai.BadRequestError) as theirs:
        b.responses.create(model="frontier", input=[*window, NEXT], max_output_tokens=8)
    assert theirs.value.code == "invalid_encrypted_content"
    stored = a.responses.create(model="frontier", input=CONVERSATION, max_output_tokens=8)
    with pytest.raises(openai.BadRequestError) as other:
        b.responses.compact(model="frontier", previous_response_id=stored.id)
    assert other.value.code == "previous_response_not_found"
    again = a.responses.compact(model="frontier", previous_response_id=stored.id, input="ok")
    assert [i.type for i in again.output][-1] == "compaction"
