"""The Conversations API is refused clearly (the Responses ``conversation`` id was
ignored silently, so an agent lost its history without a word): a 400 in OpenAI's format that
names the parameter and says what to use instead, with the official SDK, over HTTP and the
websocket."""

from __future__ import annotations

import json

import openai
import pytest
import websockets


def test_the_conversation_parameter_is_a_400_naming_it(quick_server: str) -> None:
    client = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")
    for conversation in ("conv_123", {"id": "conv_123"}):
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model="frontier", input="hi", max_output_tokens=5,
                                    conversation=conversation)
        err = e.value.body
        assert err["param"] == "conversation" and "previous_response_id" in err["message"]
    # null is no conversation
    r = client.responses.create(model="frontier", input="hi", max_output_tokens=5,
                                extra_body={"conversation": None})
    assert r.status in ("completed", "incomplete")


def test_the_conversations_endpoints_are_a_400(quick_server: str) -> None:
    client = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")
    calls = [lambda: client.conversations.create(items=[]),
             lambda: client.conversations.retrieve("conv_1"),
             lambda: client.conversations.delete("conv_1"),
             lambda: client.conversations.items.list("conv_1")]
    for call in calls:
        with pytest.raises(openai.BadRequestError) as e:
            call()
        assert e.value.body["code"] == "unsupported_feature"
        assert "previous_response_id" in e.value.body["message"]


async def test_the_websocket_refuses_it_too(quick_server: str) -> None:
    url = quick_server.replace("http://", "ws://") + "/v1/responses"
    async with websockets.connect(url, compression=None) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                  "input": "hi", "conversation": "conv_1"}))
        event = json.loads(await ws.recv())
        assert event["type"] == "error" and event["error"]["param"] == "conversation"
