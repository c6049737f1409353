"""aider's requests, as recorded from aider 0.86.2 (tests/data/aider/), sent to a running
gateway over Chat Completions and Anthropic Messages: the reply carries a SEARCH/REPLACE block
that turns the three-line README.md into the one the task asked for, streamed or not."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "aider"
README = "first line\nsecond line\nthird line\n"
ASKED = "Hello fastmode\nsecond line\nthird line\n"


def search_replace(reply: str, text: str) -> str:
    m = re.search(r"^README\.md\n```\n<{7} SEARCH\n(.*?)^={7}\n(.*?)^>{7} REPLACE\n```$",
                  reply, re.M | re.S)
    assert m is not None, reply
    assert text.count(m.group(1)) == 1
    return text.replace(m.group(1), m.group(2), 1)


def body(name: str, stream: bool) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads((DATA / name).read_text())
    return {**recorded, "stream": stream}


def sse_text(response: httpx.Response, pick: str) -> str:
    text = []
    for line in response.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if pick == "chat":
            for choice in event.get("choices", []):
                text.append(choice.get("delta", {}).get("content") or "")
        elif event.get("type") == "content_block_delta":
            text.append(event["delta"].get("text", ""))
    return "".join(text)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_reply_applies(quick_server: str, stream: bool) -> None:
    r = httpx.post(f"{quick_server}/v1/chat/completions", json=body("diff.json", stream),
                   headers={"authorization": "Bearer x"}, timeout=30)
    assert r.status_code == 200, r.text
    text = sse_text(r, "chat") if stream else r.json()["choices"][0]["message"]["content"]
    assert search_replace(text, README) == ASKED


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages_reply_applies(quick_server: str, stream: bool) -> None:
    r = httpx.post(f"{quick_server}/v1/messages", json=body("diff-messages.json", stream),
                   headers={"x-api-key": "x", "anthropic-version": "2023-06-01"}, timeout=30)
    assert r.status_code == 200, r.text
    text = (sse_text(r, "messages") if stream
            else "".join(b["text"] for b in r.json()["content"] if b["type"] == "text"))
    assert search_replace(text, README) == ASKED


def test_responses_reply_applies(quick_server: str) -> None:
    """The same conversation as a Responses request: the system prompt as instructions."""
    messages = body("diff.json", False)["messages"]
    request = {"model": "frontier", "instructions": messages[0]["content"],
               "input": [{"role": m["role"], "content": m["content"]} for m in messages[1:]]}
    r = httpx.post(f"{quick_server}/v1/responses", json=request,
                   headers={"authorization": "Bearer x"}, timeout=30)
    assert r.status_code == 200, r.text
    text = "".join(part["text"] for item in r.json()["output"] if item["type"] == "message"
                   for part in item["content"] if part["type"] == "output_text")
    assert search_replace(text, README) == ASKED
