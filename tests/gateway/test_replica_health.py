"""A replica that fails, as a client and an operator see it (``gateway.edge.replica_health``).

An exception is injected into the step of the spark replica serving a request. What must
hold: the request gets a clear answer in its protocol's own format (Chat's error event mid-
stream, a 503 body when not streamed), billed for what was sent, never a hang; the failure is
counted in ``/metrics``; ``/readyz`` names the replica (and says ``degraded`` while a replica
that failed again soon is out of routing); the next request is served.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from test_stream_interval import BODIES, config, sse_data

from fastmode.gateway.app import create_app

USER = [{"role": "user", "content": "Explain continuous batching."}]  # prose, no script
CHAT = {**BODIES["/v1/chat/completions"], "messages": USER, "max_tokens": 400,
        "ignore_eos": True}
WHOLE = {**{k: v for k, v in CHAT.items() if k != "stream_options"}, "stream": False}


@pytest.fixture
async def served(tmp_path) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    app = create_app(config(1, tmp_path))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield app, client


def spark(app: Any) -> list[Any]:
    return app.state.gateway.deployments["spark"].replicas


def fail_next_step(replica: Any) -> None:
    def boom(rep: Any, result: Any) -> None:
        rep.on_step = previous
        raise RuntimeError("injected step failure")
    previous = replica.on_step
    replica.on_step = boom


async def fail_when_serving(replica: Any) -> None:
    """Once the replica has produced tokens of a request of ours, its next step raises."""
    while not replica.scheduler.decoding:
        await asyncio.sleep(0.001)
    fail_next_step(replica)


def failures(text: str, replica: str) -> float:
    m = re.search(r'fastmode_replica_failures_total\{deployment="spark",kind="exception",'
                  rf'replica="{replica}"\}} (\S+)', text)
    return float(m.group(1)) if m else 0.0


async def test_a_stream_on_a_failed_replica_ends_with_the_error_event(served) -> None:
    app, client = served
    r0 = spark(app)[0]
    injector = asyncio.ensure_future(fail_when_serving(r0))
    r = await asyncio.wait_for(client.post("/v1/chat/completions", json=CHAT), 10)
    await injector
    events = sse_data(r.text)
    assert events[-1]["error"]["code"] == "replica_failed"  # Chat's error event, the last one
    assert "[DONE]" not in r.text
    rows = app.state.gateway.state
    await rows.flush()
    row = next(x for x in await rows.usage_rows() if x.request_id == r.headers["x-request-id"])
    assert (row.status, row.ended, row.detail) == (503, "failed", "replica_failed")
    assert 0 < row.output_tokens < 400
    metrics = (await client.get("/metrics")).text
    assert failures(metrics, "spark-0") == 1
    ready = (await client.get("/readyz")).json()
    assert ready["recent_replica_failures"]["spark-0"]["kind"] == "exception"
    assert ready["recent_replica_failures"]["spark-0"]["ended"] == 1
    assert r0.alive and r0.healthy  # restarted at once: the next request is served whole
    again = await client.post("/v1/chat/completions", json=WHOLE)
    assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 400


async def test_a_request_not_streamed_gets_a_503_in_its_format(served) -> None:
    app, client = served
    r0 = spark(app)[0]
    injector = asyncio.ensure_future(fail_when_serving(r0))
    for path, body in (("/v1/chat/completions", WHOLE),
                       ("/v1/messages", {**BODIES["/v1/messages"], "messages": USER,
                                         "max_tokens": 400, "stream": False})):
        if injector.done():
            injector = asyncio.ensure_future(fail_when_serving(r0))
        r = await asyncio.wait_for(client.post(path, json=body), 10)
        await injector
        assert r.status_code == 503
        error = r.json()
        if path == "/v1/messages":  # Anthropic's error body
            assert error["type"] == "error" and error["error"]["type"] == "api_error"
            assert "replica" in error["error"]["message"]
        else:
            assert error["error"]["code"] == "replica_failed"


async def test_readyz_names_a_replica_out_of_routing(served) -> None:
    app, client = served
    r0, r1 = spark(app)
    for _ in (1, 2):  # failing again within the window: out of routing for a backoff
        injector = asyncio.ensure_future(fail_when_serving(r0))
        await asyncio.wait_for(client.post("/v1/chat/completions", json=CHAT), 10)
        await injector
    assert not r0.healthy
    r = await client.get("/readyz")
    body = r.json()
    assert r.status_code == 200 and body["status"] == "degraded"
    assert body["unhealthy_replicas"]["spark-0"]["failures"] == 2
    assert body["tiers"]["spark"]["unhealthy_replicas"] == ["spark-0"]
    assert body["tiers"]["spark"]["ready"] is True  # spark-1 serves meanwhile
    served_by = orjson.loads((await client.post(
        "/v1/chat/completions", json={**WHOLE, "max_tokens": 20})).content)
    assert served_by["usage"]["completion_tokens"] == 20
    assert r1.steps > 0 and failures((await client.get("/metrics")).text, "spark-0") == 2
