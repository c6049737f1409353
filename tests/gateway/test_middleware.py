"""A response-body middleware added to the app: streams stay correct.

The streaming hot path writes token events with the server's own ``send`` (``RAW_SEND``),
past the middleware added to the app. A middleware that rewrites bodies (GZip) would then have
seen the response start but none of the body: a corrupt stream. The app keeps the raw send for
middleware known not to touch bodies only; under any other, every byte goes through it.
"""

from __future__ import annotations

import httpx
import orjson
import pytest
from starlette.middleware.gzip import GZipMiddleware
from starlette.testclient import TestClient
from test_stream_interval import BODIES, N_TOKENS, PROMPT, REPLY, config, deltas_and_usage, sse_data

from fastmode.gateway.app import create_app


@pytest.mark.parametrize("compress_sse", [True, False])
@pytest.mark.parametrize("path", list(BODIES))
async def test_a_gzip_middleware_gets_every_byte_of_a_stream(tmp_path, path, compress_sse,
                                                            caplog) -> None:
    """Starlette's GZip leaves ``text/event-stream`` alone by default (it still holds the
    response start until the first body message), and compresses it when told to."""
    app = create_app(config(1, tmp_path))
    app.add_middleware(GZipMiddleware, minimum_size=0,
                       **({"exclude_content_types": ()} if compress_sse else {}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.post(path, json=BODIES[path], headers={"accept-encoding": "gzip"})
    assert r.status_code == 200
    assert r.headers.get("content-encoding") == ("gzip" if compress_sse else None)
    events = sse_data(r.text)  # httpx decompresses
    deltas, output, _ = deltas_and_usage(path, events)
    assert output == N_TOKENS == len(deltas) and "".join(deltas) == REPLY[: len("".join(deltas))]
    if path == "/v1/chat/completions":
        assert r.text.rstrip().endswith("data: [DONE]")
    assert any("may rewrite response bodies" in rec.getMessage() for rec in caplog.records)


def test_the_websocket_under_such_a_middleware_streams_whole(tmp_path) -> None:
    app = create_app(config(1, tmp_path))
    app.add_middleware(GZipMiddleware, minimum_size=0)
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses") as ws:
        ws.send_text(orjson.dumps({"type": "response.create", "model": "frontier-spark",
                                   "input": PROMPT, "max_output_tokens": N_TOKENS}).decode())
        events = []
        ends = ("response.completed", "response.incomplete", "error")
        while not events or events[-1]["type"] not in ends:
            events.append(orjson.loads(ws.receive_text()))
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) == N_TOKENS and "".join(deltas) == REPLY[: len("".join(deltas))]
    assert events[-1]["response"]["usage"]["output_tokens"] == N_TOKENS


async def test_without_such_middleware_the_raw_send_is_kept(tmp_path) -> None:
    """The app's own middleware (the body limit) does not cost the hot path its raw send."""
    app = create_app(config(1, tmp_path))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.post("/v1/chat/completions", json=BODIES["/v1/chat/completions"])
    assert r.status_code == 200 and app.raw_send_ok is True
