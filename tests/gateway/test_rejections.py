"""What a client sent, seen from the server: a refused request is one INFO line on
``fastmode.requests`` (field path, user agent), a trace when traced, and ``x-fastmode-trace:
body`` keeps the body and headers, redacted. A real ``fastmode serve --log-level info`` with
auth on, driven by the official SDKs (fastmode/gateway/observe/rejections.py, trace_bodies.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import websockets
from conftest import launch, quick_config_text, stop_server

from fastmode.gateway.observe.exchange_format import Redactor
from fastmode.gateway.observe.trace_bodies import BodyBounds, capture

KEY = "sk-rejected-a-4c2e9b7d1f3a58604c2e9b7d1f3a5860"
OTHER = "sk-rejected-b-8a1d3f5c7e9b02468a1d3f5c7e9b0246"
SECRET = "sk-ant-api03-Zq8mXv2LwP9tRk4sYd7bNc1hFj6gUe3o"  # a key pasted into a prompt
TRACED = {"x-fastmode-trace": "1"}
BODY = {"x-fastmode-trace": "body"}


def _config() -> str:
    text = quick_config_text()
    auth = text.index("[auth]\nenabled = false")
    end = text.index("\n", auth + len("[auth]\n"))
    return (text[:auth] + f'[auth]\nenabled = true\n[[auth.keys]]\nkey = "{KEY}"\n'
            f'[[auth.keys]]\nkey = "{OTHER}"\n' + text[end + 1:])


class Server:
    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log

    def lines(self, needle: str = "rejected ") -> list[str]:
        """The log's lines holding ``needle``, once the server has written them."""
        deadline = time.monotonic() + 5
        while True:
            found = [ln for ln in self.log.read_text().splitlines() if needle in ln]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def traces(self, key: str = KEY) -> list[dict[str, Any]]:
        r = httpx.get(self.url + "/v1/fastmode/traces",
                      headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 200
        return [json.loads(ln) for ln in r.text.splitlines()]

    def raw_traces(self) -> str:
        return httpx.get(self.url + "/v1/fastmode/traces",
                         headers={"authorization": f"Bearer {KEY}"}).text


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("rejections")
    log = tmp / "server.log"
    with log.open("wb") as f:
        proc, url = launch("--log-level", "info", config_text=_config(), tmp=tmp, log=f)
        try:
            yield Server(url, log)
        finally:
            stop_server(proc)


def oa(server: Server, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, **kw)


def an(server: Server, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, **kw)


def test_a_chat_400_is_one_line_with_the_field_path_and_the_user_agent(server: Server) -> None:
    with pytest.raises(openai.BadRequestError):
        oa(server).chat.completions.create(
            model="frontier", messages=[{"role": "user", "content": "hi"},
                                        {"role": "wizard", "content": "x"}])  # type: ignore
    lines = server.lines("POST /v1/chat/completions")
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("INFO:") and "rejected 400 POST /v1/chat/completions" in line
    assert "param=messages[1].role" in line
    assert f'ua="OpenAI/Python {openai.__version__}"' in line
    assert "Traceback" not in server.log.read_text()


def test_a_messages_400_is_logged_with_its_field_and_the_anthropic_user_agent(
        server: Server) -> None:
    with pytest.raises(anthropic.BadRequestError):
        an(server).messages.create(model="frontier", max_tokens=8,
                                   messages=[{"role": "robot", "content": "hi"}])  # type: ignore
    lines = server.lines("POST /v1/messages ")
    assert len(lines) == 1, lines
    assert "param=messages[0].role" in lines[0]
    assert f'ua="Anthropic/Python {anthropic.__version__}"' in lines[0]


def test_every_route_logs_its_4xx(server: Server) -> None:
    """count_tokens, embeddings, Responses, a 404 unknown model, a 413 past the body bound."""
    client = oa(server)
    with pytest.raises(anthropic.BadRequestError):
        an(server).messages.count_tokens(model="frontier", messages=[])
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="text-embedding-3-small", input=[],
                                 dimensions=-3)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="frontier", input="hi", temperature=9)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model",
                                       messages=[{"role": "user", "content": "hi"}])
    r = httpx.post(server.url + "/v1/chat/completions", content=b"x" * (17 << 20),
                   headers={"authorization": f"Bearer {KEY}",
                            "content-type": "application/json"})
    assert r.status_code == 413
    assert len(server.lines("POST /v1/messages/count_tokens")) == 1
    assert len(server.lines("POST /v1/embeddings")) == 1
    assert "param=temperature" in server.lines("rejected 400 POST /v1/responses")[0]
    assert "param=model" in server.lines("rejected 404 POST /v1/chat/completions")[0]
    assert server.lines("rejected 413 POST /v1/chat/completions")


async def test_the_websocket_logs_and_traces_a_refused_response_create(server: Server) -> None:
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    headers = {"authorization": f"Bearer {KEY}", "user-agent": "codex_cli_rs/0.171.0",
               **BODY}
    async with websockets.connect(url, additional_headers=headers, compression=None) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "frontier",
                                  "input": "hi", "tools": [{"type": "teleport"}]}))
        event = json.loads(await ws.recv())
    assert event["type"] == "error" and event["status"] == 400
    line = server.lines("ws response.create")[0]
    assert "rejected 400 ws response.create" in line and 'ua="codex_cli_rs/0.171.0"' in line
    assert f"param={event['error']['param']}" in line
    mine = [t for t in server.traces() if t["transport"] == "websocket" and t["error"]]
    assert mine and mine[-1]["status"] == 400 and mine[-1]["model"] == "frontier"
    assert mine[-1]["body"]["tools"] == [{"type": "teleport"}]
    assert mine[-1]["headers"]["authorization"] == "[REDACTED]"


def test_a_traced_rejection_is_in_the_traces_with_its_error(server: Server) -> None:
    with pytest.raises(openai.NotFoundError):
        oa(server, default_headers=TRACED).chat.completions.create(
            model="no-such-model-9", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError):
        an(server, default_headers=TRACED).messages.create(
            model="frontier", max_tokens=8, messages=[{"role": "robot", "content": "hi"}])
    records = [t for t in server.traces() if t["error"] is not None]
    chat = next(t for t in records if t["model"] == "no-such-model-9")
    assert chat["status"] == 404 and chat["protocol"] == "chat" and chat["events"] == []
    assert chat["error"]["param"] == "model" and "no-such-model-9" in chat["error"]["message"]
    assert chat["user_agent"] == f"OpenAI/Python {openai.__version__}"
    assert chat["body"] is None  # a body only on opt-in
    msg = next(t for t in records if t["protocol"] == "messages" and t["status"] == 400)
    assert msg["error"]["type"] == "invalid_request_error"
    assert msg["error"]["param"] == "messages[0].role" and msg["model"] == "frontier"
    # another key does not see them; an untraced rejection leaves none
    assert not [t for t in server.traces(OTHER) if t["error"] is not None]
    before = len(records)
    with pytest.raises(openai.NotFoundError):
        oa(server).chat.completions.create(model="untraced-model",
                                           messages=[{"role": "user", "content": "hi"}])
    assert len([t for t in server.traces() if t["error"] is not None]) == before


def test_trace_body_keeps_the_body_redacted(server: Server) -> None:
    reply = an(server, default_headers=BODY).messages.create(
        model="frontier", max_tokens=8,
        messages=[{"role": "user", "content": f"my key is {SECRET}, keep it safe"}])
    assert reply.content
    rec = next(t for t in reversed(server.traces()) if t["request_id"]
               and t["protocol"] == "messages" and t["body"] is not None and not t["error"])
    assert rec["status"] == 200 and rec["events"]
    assert rec["body"]["model"] == "frontier" and rec["body"]["max_tokens"] == 8
    assert rec["body"]["messages"][0]["content"] == "my key is [REDACTED], keep it safe"
    sent = {k: v for k, v in rec["headers"].items() if k in ("authorization", "x-api-key")}
    assert sent and set(sent.values()) == {"[REDACTED]"}  # named, never shown
    assert rec["headers"]["user-agent"] == f"Anthropic/Python {anthropic.__version__}"
    whole = server.raw_traces()
    assert KEY not in whole and SECRET not in whole and OTHER not in whole


def test_a_kept_body_is_bounded_and_redacted_before_it_is_cut() -> None:
    redactor = Redactor([r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"])
    bounds = BodyBounds(string_chars=40, max_bytes=2000)
    straddling = "x" * 35 + SECRET  # the cut at 40 falls inside the key
    body = {"model": "m", "messages": [{"role": "user", "content": straddling}] * 500,
            "deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["down"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}
    out = capture(json.dumps(body).encode(), "chat", redactor, bounds)
    first = out["messages"][0]["content"]
    assert first.startswith("x" * 35 + "[REDA") and "cut at 40" in first
    assert SECRET[:12] not in json.dumps(out)
    assert "more items not kept" in out["messages"][-1]
    assert len(json.dumps(out)) < 3 * bounds.max_bytes
    assert len(out["messages"]) < 500
    out = capture(json.dumps({"deep": body["deep"]}).encode(), "chat", redactor, bounds)
    assert "nested deeper than" in json.dumps(out)
    assert capture(b"{not json", "chat", redactor, bounds) == "{not json"
