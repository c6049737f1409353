"""``[tiers.NAME] stream_interval``: N tokens per streamed event, on every protocol, in process.

What a client sees: ceil(n / N) content events carrying the same text (the last one the
remainder), the same usage and cost; each event goes out when its last token is due on the
engine's modeled timeline. And the encoders' fast path (events encoded ahead of the stream)
never shows: a stream that ends early carries exactly what was sent.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from fastmode.gateway import protocols
from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, default_config_text, load_config
from fastmode.gateway.pipeline.turn import Turn
from fastmode.gateway.protocols import events
from fastmode.gateway.protocols.base import RequestContext

PROMPT = "interval test: stream the fixed reply"
REPLY = ("Continuous batching keeps every slot of the engine busy: when one sequence ends, "
         "the next one takes its place at the following step, and the scheduler never waits "
         "for a whole batch to drain before it admits more work.")
N_TOKENS = 30


def config(interval: int, tmp_path) -> Config:
    text = default_config_text()
    assert "stream_interval = 1" in text
    text = text.replace("stream_interval = 1", f"stream_interval = {interval}", 1)
    text += f'\n[[scripts]]\nmatch = "^interval test:"\nreply = "{REPLY}"\n'
    path = tmp_path / f"c{interval}.toml"
    path.write_text(text)
    return load_config(path)


@pytest.fixture
async def client_for(tmp_path) -> AsyncIterator:
    stack = []

    async def make(interval: int):
        app = create_app(config(interval, tmp_path))
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        stack.append((ctx, client))
        return app, client

    yield make
    for ctx, client in reversed(stack):
        await client.aclose()
        await ctx.__aexit__(None, None, None)


USER = [{"role": "user", "content": PROMPT}]
BODIES = {
    "/v1/chat/completions": {"model": "frontier-spark", "messages": USER, "stream": True,
                             "max_tokens": N_TOKENS,
                             "stream_options": {"include_usage": True}},
    "/v1/responses": {"model": "frontier-spark", "input": PROMPT, "stream": True,
                      "max_output_tokens": N_TOKENS},
    "/v1/messages": {"model": "frontier-spark", "messages": USER, "stream": True,
                     "max_tokens": N_TOKENS},
}


def sse_data(text: str) -> list[dict]:
    return [orjson.loads(line[6:]) for line in text.split("\n")
            if line.startswith("data: {")]


def deltas_and_usage(path: str, events: list[dict]) -> tuple[list[str], int, float]:
    """The text deltas, the output tokens and the cost a client reads, per protocol."""
    if path == "/v1/chat/completions":
        deltas = [e["choices"][0]["delta"]["content"] for e in events
                  if e.get("choices") and "content" in e["choices"][0]["delta"]
                  and "role" not in e["choices"][0]["delta"]]
        usage = next(e["usage"] for e in events if e.get("usage"))
        return deltas, usage["completion_tokens"], usage["cost_usd"]
    if path == "/v1/responses":
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        final = next(e for e in events if e["type"] in ("response.completed",
                                                         "response.incomplete"))
        usage = final["response"]["usage"]
        return deltas, usage["output_tokens"], usage["cost_usd"]
    deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
    usage = next(e for e in events if e["type"] == "message_delta")["usage"]
    return deltas, usage["output_tokens"], usage["cost_usd"]


@pytest.mark.parametrize("path", list(BODIES))
async def test_n_tokens_per_event_same_text_same_usage(client_for, path) -> None:
    _, one = await client_for(1)
    _, eight = await client_for(8)
    r1 = await one.post(path, json=BODIES[path])
    r8 = await eight.post(path, json=BODIES[path])
    assert r1.status_code == r8.status_code == 200
    d1, out1, cost1 = deltas_and_usage(path, sse_data(r1.text))
    d8, out8, cost8 = deltas_and_usage(path, sse_data(r8.text))
    assert out1 == out8 == N_TOKENS == len(d1)  # one event per token by default
    assert len(d8) == math.ceil(N_TOKENS / 8)  # the last event flushes the remainder
    assert "".join(d8) == "".join(d1)
    assert cost8 == cost1
    events8 = sse_data(r8.text)
    if path == "/v1/responses":  # sequence numbers stay contiguous with fewer events
        seqs = [e["sequence_number"] for e in events8]
        assert seqs == list(range(len(seqs)))


@pytest.fixture
def first_reply(monkeypatch) -> None:
    """As in a fresh process: no encoder's kind is known yet, so the first reply's events are
    made event by event while the buffer learns it (``protocols.events``)."""
    monkeypatch.setattr(events, "_RECORDS", {})


@pytest.mark.parametrize("path", list(BODIES))
async def test_the_first_reply_of_a_process_is_grouped_too(client_for, first_reply,
                                                           path) -> None:
    _, eight = await client_for(8)
    r8 = await eight.post(path, json=BODIES[path])
    assert r8.status_code == 200
    d8, out8, _ = deltas_and_usage(path, sse_data(r8.text))
    assert out8 == N_TOKENS and len(d8) == math.ceil(N_TOKENS / 8)
    assert "".join(d8) == REPLY[:len("".join(d8))]


def test_the_websocket_groups_the_same(tmp_path, first_reply) -> None:
    app = create_app(config(8, tmp_path))
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses") as ws:
        ws.send_text(orjson.dumps({"type": "response.create", "model": "frontier-spark",
                                   "input": PROMPT, "max_output_tokens": N_TOKENS}).decode())
        events = []
        while True:
            event = orjson.loads(ws.receive_text())
            events.append(event)
            if event["type"] in ("response.completed", "response.incomplete", "error"):
                break
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) == math.ceil(N_TOKENS / 8)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["usage"]["output_tokens"] == N_TOKENS


@pytest.mark.parametrize("interval", [1, 8])
async def test_each_event_goes_out_when_its_last_token_is_due(client_for, interval) -> None:
    """Through the turn pipeline itself: when a content event is handed to the transport, its
    last token is the last one the engine produced (the reader kept up), and the stream's
    modeled time for it is the end of the step that produced it."""
    app, _ = await client_for(interval)
    gateway = app.state.gateway
    proto = protocols.ENDPOINTS["/chat/completions"]
    req = proto.validate(BODIES["/v1/chat/completions"])
    turn = Turn(gateway, proto, req, RequestContext({}, False, app.state.responses))
    job = await turn.start()
    stream = job.stream
    seen = []
    async for chunk in turn.sse():
        if b'"delta":{"content":' in chunk:
            seq, replica = stream.seq, stream.replica
            produced = min(replica.done_index - seq.first_step + 1, seq.output_tokens)
            seen.append((stream.delivered, produced, stream.last_at, replica.done_end))
    counts = [d for d, _, _, _ in seen]
    assert counts[-1] == N_TOKENS and len(seen) == math.ceil(N_TOKENS / interval)
    assert all(c % interval == 0 for c in counts[:-1])
    for delivered, produced, last_at, step_end in seen:
        assert delivered == produced  # sent as soon as its last token was due, not later
        assert last_at == pytest.approx(step_end)
    assert job.time_info()["completion_time"] == pytest.approx(
        stream.seq.finished_at - stream.seq.first_token_at)


@pytest.mark.parametrize("interval", [1, 8])
async def test_an_error_mid_stream_carries_what_was_sent(client_for, interval) -> None:
    """The encoder runs ahead of the stream; an error event after 10 tokens still numbers its
    sequence right after the last delta sent."""
    _, client = await client_for(interval)
    r = await client.post("/v1/responses", json=BODIES["/v1/responses"],
                          headers={"x-fastmode-fault": "error-event;after=10"})
    events = sse_data(r.text)
    assert events[-1]["type"] == "response.failed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert 0 < len("".join(deltas)) < len(REPLY)


@pytest.mark.parametrize("interval", [1, 8])
def test_a_cancelled_websocket_turn_reports_the_text_sent(tmp_path, interval) -> None:
    """``response.cancel`` after some deltas: the partial output in ``response.incomplete`` is
    exactly the text of the deltas the client got (not what the encoder prepared ahead)."""
    app = create_app(config(interval, tmp_path))
    body = {"type": "response.create", "model": "frontier", "input": PROMPT,
            "max_output_tokens": 400}  # the standard tier: slow enough to cancel mid-way
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses") as ws:
        ws.send_text(orjson.dumps(body).decode())
        deltas: list[str] = []
        events = []
        while True:
            event = orjson.loads(ws.receive_text())
            events.append(event)
            if event["type"] == "response.output_text.delta":
                deltas.append(event["delta"])
                if len(deltas) == 3:
                    ws.send_text(orjson.dumps({"type": "response.cancel"}).decode())
            if event["type"] in ("response.completed", "response.incomplete", "error"):
                break
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["status"] == "cancelled"
    sent = "".join(d for e in events if e["type"] == "response.output_text.delta"
                   for d in [e["delta"]])
    assert final["response"]["output"][0]["content"][0]["text"] == sent
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_grouping_merges_one_kind_within_a_group_and_never_reasoning() -> None:
    from fastmode.backends.mockmodel import Piece
    from fastmode.gateway.protocols.events import Runs, grouped

    kinds = [-2, -2, -1, -1, -1, -1, -1, 0, 0, 0, 1, 1]  # reasoning, text, call 0, call 1
    pieces = tuple(Piece(f"<{k}:{i}>", k) for i, k in enumerate(kinds))
    for runs in (None, Runs(pieces)):  # the laid-out reply gives the same events
        got = [(i, p.text, p.tool) for i, p in grouped(pieces, 0, len(pieces), 4, None, None,
                                                          runs)]
        assert got == [
            (0, "<-2:0>", -2), (1, "<-2:1>", -2),  # reasoning: one event per token
            (3, "<-1:2><-1:3>", -1),  # the rest of group 0 (tokens 0-3)
            (6, "<-1:4><-1:5><-1:6>", -1), (7, "<0:7>", 0),  # group 1: a change of kind
            (9, "<0:8><0:9>", 0), (11, "<1:10><1:11>", 1),  # group 2
        ]
        # asked for in whole groups, the events are the same however the range is cut
        cut = [(i, p.text) for a, b in ((0, 4), (4, 8), (8, 12))
               for i, p in grouped(pieces, a, b, 4, None, None, runs)]
        assert cut == [(i, t) for i, t, _ in got]
