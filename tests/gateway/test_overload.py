"""Overload answers early, with retry-after from the modeled drain (gateway.overflow); readiness
names a tier that cannot serve (gateway.health); a reader that stops reading or falls behind is
cut, its slot freed (gateway.watchdog, Turn._events)."""

from __future__ import annotations

import asyncio
import math
import random
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from urllib.parse import urlparse

import httpx
import orjson
import pytest
from configs import with_keys
from test_openai_sdk import USER

from fastmode.backends.drivers import new_sequence
from fastmode.backends.drivers.base import Replica
from fastmode.backends.engine import build
from fastmode.backends.free_slot import free_slot_in
from fastmode.backends.mockmodel import GenerationRequest
from fastmode.backends.scheduler import Scheduler
from fastmode.backends.tenants import TenantLoad
from fastmode.gateway.app import create_app
from fastmode.gateway.config import load_config
from fastmode.gateway.engines.overflow import QueueModel
from fastmode.gateway.engines.overflow import relief as overflow_relief
from fastmode.gateway.errors import APIError
from fastmode.gateway.pipeline.turn import Turn
from fastmode.gateway.protocols import CHAT, RequestContext
from fastmode.gateway.values.request import TurnRequest

SMALL_QUEUE = """
[deployments.std]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
max_batch = 4
max_waiting = 8
[deployments.std.background]
occupancy = 0.5
context_tokens = 2000
[tiers.standard]
deployment = "std"
[tiers.standard.prices]
input = 5.0
cached_input = 0.5
output = 25.0
[server]
max_queue_wait_s = 1
stream_max_lag_s = 0.2
[routes.frontier]
standard = "standard"
fast = "standard"
"""


def test_queue_model_plays_the_queue_forward() -> None:
    """Four running sequences free their slots after 9, 19, 29, 39 more steps; two waiting
    ones take the first two of those slots; a new request gets the next: step 19."""
    fast = build(load_config().sim()).deployments["fast"]
    # 16 slots, 12 held by others (set here: the default config's tenants are tuned apart)
    sched = Scheduler(fast.placement, replace(fast.limits, max_batch=16),
                      replace(fast.background, seqs=12))
    for out in (10, 20, 30, 40):
        assert sched.submit(new_sequence(100, out, 0.0))
    sched.step(0.0)  # prefill: every sequence has its first token
    for out in (5, 7):
        assert sched.submit(new_sequence(100, out, 0.0))
    model = QueueModel()
    assert model.wait_steps(sched) == (19, 9)
    # one more in the same step: only the new one is played (cached), and it waits longer
    sched.submit(new_sequence(100, 3, 0.0))
    assert model.wait_steps(sched) == (23, 9)


@pytest.fixture
async def small_app(tmp_path) -> AsyncIterator:
    path = tmp_path / "q.toml"
    path.write_text(SMALL_QUEUE)
    app = create_app(load_config(path))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    yield app
    await ctx.__aexit__(None, None, None)


async def hold(app, tokens: int = 3000):
    gen = GenerationRequest(messages=USER, ignore_eos=True)
    return await app.state.gateway.admit(TurnRequest("frontier", "standard", gen, 20, tokens,
                                                       True))


async def test_a_long_modeled_wait_is_refused_at_once_with_a_modeled_retry_after(
        small_app) -> None:
    gateway = small_app.state.gateway
    held = [await hold(small_app), await hold(small_app)]  # both free slots, 3000 tokens each
    deadline = time.monotonic() + 5
    while not gateway.engine._step_s and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # the replica's first step sets its step time
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=small_app),
                                 base_url="http://t") as c:
        r = await c.post("/v1/chat/completions",
                         json={"model": "frontier", "messages": USER, "max_tokens": 5})
        ready = await c.get("/readyz")
    assert r.status_code == 503 and r.json()["error"]["code"] == "server_is_overloaded"
    assert "modeled wait" in r.json()["error"]["message"]
    step = next(iter(gateway.engine._step_s.values()))
    retry = int(r.headers["retry-after-ms"]) / 1000
    # the first held request frees its slot after ~2999 more steps: retry when the wait is 1 s
    assert retry == pytest.approx(2999 * step - 1, rel=0.05)
    assert ready.status_code == 503  # the only tier cannot serve
    assert ready.json()["tiers"]["standard"]["ready"] is False
    for job in held:
        gateway.settle(job, 499)
    assert gateway.metrics.rejections.labels("queue_wait", "standard")._value.get() == 1


async def test_a_reader_that_falls_behind_is_cut_with_an_error_event(small_app) -> None:
    gateway = small_app.state.gateway
    req = CHAT.validate({"model": "frontier", "messages": USER, "max_tokens": 400,
                         "stream": True, "ignore_eos": True})
    turn = Turn(gateway, CHAT, req, RequestContext({}, False, small_app.state.responses))
    await turn.start()
    events = turn.sse()
    await events.__anext__()  # the opening chunk
    await events.__anext__()  # the first tokens
    await asyncio.sleep(0.5)  # the reader pauses longer than stream_max_lag_s = 0.2
    rest = [chunk async for chunk in events]
    error = orjson.loads(rest[-1][len(b"data: "):])
    assert error["error"]["code"] == "stream_reader_too_slow"
    assert gateway.turns == set() and gateway.engine.jobs == set()
    rows = await gateway.state.usage_rows()
    assert (rows[-1].ended, rows[-1].detail) == ("cut", "reader_lagging")
    assert rows[-1].output_tokens < 400


SMALL_FAST = SMALL_QUEUE.replace("""[routes.frontier]
standard = "standard"
fast = "standard"
""", """[deployments.fst]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
max_batch = 4
max_waiting = 4
[tiers.fast]
deployment = "fst"
[routes.frontier]
standard = "standard"
fast = "fast"
""")


@pytest.fixture
async def fast_app(tmp_path) -> AsyncIterator:
    path = tmp_path / "f.toml"
    path.write_text(SMALL_FAST)
    app = create_app(load_config(path))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    yield app
    await ctx.__aexit__(None, None, None)


async def test_a_burst_that_fills_the_fast_pool_is_told_when_a_slot_frees(fast_app) -> None:
    """A burst of long fast streams fills the pool before its first step; the
    refused one was told ``retry-after-ms: 1`` (no step time known yet, prompts not decoding).
    Now: the modeled time its first stream finishes (``backends.free_slot``, checked against
    the timeline in tests/backends/test_free_slot.py), rounded up in both headers."""
    gateway = fast_app.state.gateway
    gen = GenerationRequest(messages=USER, ignore_eos=True)

    async def fast(tokens: int):
        return await gateway.admit(TurnRequest("frontier", "fast", gen, 20, tokens, True))

    held = [await fast(3000) for _ in range(8)]  # 4 slots + 4 waiting, no step run yet
    with pytest.raises(APIError) as refused:
        await fast(3000)
    dep = gateway.deployments["fst"]
    expected = free_slot_in([r.scheduler for r in dep.replicas], dep.driver.now)
    headers = refused.value.headers
    assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"
    ms = int(headers["retry-after-ms"])
    assert ms / 1000 == pytest.approx(expected, abs=0.005)
    assert expected > 3.0  # 3,000 tokens a stream: seconds away, not a millisecond
    assert headers["retry-after"] == str(math.ceil(ms / 1000))
    for job in held:
        job.cancel()
        gateway.settle(job, 499)


def test_a_reader_that_stops_reading_is_cut_and_its_slot_freed(server_factory) -> None:
    text = with_keys(stream_max_lag_s=1, socket_send_buffer_bytes=16384)
    url = server_factory(config_text=text)
    u = urlparse(url)
    body = orjson.dumps({"model": "frontier-spark", "messages": USER, "max_tokens": 20000,
                         "stream": True, "ignore_eos": True})
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills fast
    s.connect((u.hostname, u.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: "
              b"application/json\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
              + body)
    try:  # read nothing; the server must give up on us
        deadline = time.monotonic() + 20
        rows: list[dict] = []
        while time.monotonic() < deadline:
            text = httpx.get(url + "/metrics").text
            if 'fastmode_cancelled_total{tier="spark"} 1.0' in text:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the stalled stream was not cut")
        running = [line for line in httpx.get(url + "/metrics").text.splitlines()
                   if line.startswith("fastmode_replica_running{") and "spark" in line]
        assert all(line.endswith(" 0.0") for line in running), running
    finally:
        s.close()
    assert rows == []


def _ws_frame(text: bytes) -> bytes:
    """One masked client text frame (RFC 6455)."""
    import os
    mask = os.urandom(4)
    n = len(text)
    head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                            bytes([0x80 | 126]) + n.to_bytes(2, "big"))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(text))


def test_a_websocket_reader_that_stops_reading_is_cut_and_its_slot_freed(
        server_factory) -> None:
    """The same over the Responses websocket: the socket fills, the pushed write has to wait,
    the turn's task takes it over and the watchdog ends it; the slot is free again."""
    text = with_keys(stream_max_lag_s=1, socket_send_buffer_bytes=16384)
    url = server_factory(config_text=text)
    u = urlparse(url)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((u.hostname, u.port))
    s.sendall(b"GET /v1/responses HTTP/1.1\r\nhost: t\r\nupgrade: websocket\r\n"
              b"connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              b"sec-websocket-version: 13\r\n\r\n")
    s.settimeout(10)
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 101")
    s.sendall(_ws_frame(orjson.dumps({"type": "response.create", "model": "frontier-spark",
                                      "input": "hello", "max_output_tokens": 20000,
                                      "ignore_eos": True})))
    try:  # read nothing more; the server must give up on us
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if 'fastmode_cancelled_total{tier="spark"} 1.0' in httpx.get(url + "/metrics").text:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the stalled websocket stream was not cut")
        deadline = time.monotonic() + 5
        while True:
            running = [line for line in httpx.get(url + "/metrics").text.splitlines()
                       if line.startswith("fastmode_replica_running{") and "spark" in line]
            if all(line.endswith(" 0.0") for line in running):
                break
            assert time.monotonic() < deadline, running
            time.sleep(0.05)
    finally:
        s.close()


@pytest.mark.parametrize("waiting", [0, 6, 30])
def test_the_modeled_wait_is_what_the_request_then_waits(waiting: int) -> None:
    """The wait a refusal states (steps played forward x the replica's step time) against the
    wait the same request then has on the clock-free scheduler, stepped to its admission: the
    steps agree within 2% (the model plays each waiting prompt's prefill on its own; the engine
    packs several into one step's token budget) and the seconds within the spread of the step
    times on the way (a step's time moves with its batch)."""
    fast = build(load_config().sim()).deployments["fast"]
    sched = Scheduler(fast.placement, replace(fast.limits, max_batch=16, max_waiting=64),
                      replace(fast.background, seqs=8))
    for i in range(8):  # the batch full: 8 of the clients' beside 8 of the other tenants'
        assert sched.submit(new_sequence(200, 40 + 10 * i, 0.0))
    now, steps = 0.0, []
    result = sched.step(now)
    assert result is not None
    now = result.end
    steps.append(result.end - result.start)
    for i in range(waiting):
        assert sched.submit(new_sequence(200, 30 + 7 * i, now))
    model = QueueModel()
    wait_steps, _ = model.wait_steps(sched)
    stated = wait_steps * steps[-1]
    seq = new_sequence(200, 20, now)
    assert sched.submit(seq)
    arrived, taken = now, 0
    while seq.admitted_at < 0:
        result = sched.step(now)
        assert result is not None and taken < 10_000
        now = result.end
        steps.append(result.end - result.start)
        taken += 1
    # admitted in the step after the ones it waited (the step that plans it)
    assert abs((taken - 1) - wait_steps) <= max(1, 0.02 * wait_steps)
    waited = seq.admitted_at - arrived
    lo, hi = min(steps[:taken]), max(steps[:taken])
    assert (taken - 1) * lo - 1e-9 <= waited <= (taken - 1) * hi + 1e-9
    assert stated == pytest.approx(waited, rel=max(0.02, hi / lo - 1), abs=hi)


async def test_a_queue_the_other_tenants_fill_is_named_in_the_refusal_and_readiness(
        small_app) -> None:
    """The other tenants queue for the same engine: when their requests hold the waiting
    queue's places, the 503 says so in numbers, and ``/readyz`` and the metrics count them."""
    gateway = small_app.state.gateway
    sched = next(iter(gateway.deployments.values())).replicas[0].scheduler
    free = sched.limits.max_batch - sched.background.seqs - sched.running
    # as backends.tenants publishes it: their requests hold every place, the free slots' too
    sched.queued_elsewhere = sched.limits.max_waiting + free
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=small_app),
                                 base_url="http://t") as c:
        r = await c.post("/v1/chat/completions",
                         json={"model": "frontier", "messages": USER, "max_tokens": 5})
        ready = (await c.get("/readyz")).json()["tiers"]["standard"]
        metrics = (await c.get("/metrics")).text
    assert r.status_code == 503
    assert "(0 of this gateway's requests and 10 of the other tenants' wait)" in (
        r.json()["error"]["message"])
    assert ready["ready"] is False and ready["waiting_others"] == 10
    assert ready["reason"] == "queue full (0 of ours, 10 of the other tenants')"
    assert 'fastmode_replica_waiting_others{deployment="std",replica="std-0"} 10.0' in metrics


def _backlogged_spark(seed: int) -> tuple[Replica, TenantLoad]:
    """A spark replica of the built-in config whose other tenants just took the batch: their
    backlog (they waited while a burst of ours had the slots) admitted at one tick."""
    spark = build(load_config().sim()).deployments["spark"]
    assert spark.tenants is not None
    sched = Scheduler(spark.placement, spark.limits, spark.background)
    replica = Replica(sched, "spark-0", "spark")
    tenants = replica.tenants = TenantLoad(spark.tenants, sched, random.Random(seed), 0.0, 2)
    tenants.queues[0].append([0.0, 120])
    tenants.queued += 120
    tenants.advance(tenants.next_tick)  # the tick that admits their backlog
    replica.next_start = tenants.next_tick - tenants.tick_s
    return replica, tenants


def test_a_burst_behind_the_tenants_backlog_is_told_the_wait_it_then_has() -> None:
    """The other tenants' seats hold from one of their ticks to the next: a backlog of theirs
    admitted at a tick fills the batch until the next one, which shares the slots out again.
    A burst of ours arriving then is admitted, and the wait the model states for its last
    request is the wait that request then has on the clock-free scheduler: the modeled wait
    neither refuses what the engine would serve within the bound nor understates it."""
    replica, tenants = _backlogged_spark(seed=1)
    sched = replica.scheduler
    limits = sched.limits
    assert sched.background.seqs >= limits.max_batch - 4  # the tenants hold the batch
    now = replica.next_start
    step_s = sched.step_seconds(limits.max_batch, sched.background.kv_tokens, 0, 0)
    model = QueueModel()
    burst = [new_sequence(200, 1000, now) for _ in range(60)]
    for seq in burst[:-1]:
        assert sched.submit(seq)
    relief = overflow_relief(tenants, now, step_s)
    assert relief[1] > 0
    stated = model.wait_steps(sched, relief)[0] * step_s
    kept_forever = QueueModel().wait_steps(sched)[0] * step_s  # the tenants' seats never back
    last = burst[-1]
    assert sched.submit(last)
    while last.admitted_at < 0:
        result = replica.step()
        assert result is not None and result.index < 100_000
    waited = last.admitted_at - now
    bound = load_config().server.max_queue_wait_s
    assert waited < bound  # the engine serves it within the bound ...
    assert stated < bound  # ... so it is not refused
    assert stated == pytest.approx(waited, rel=0.35)
    assert kept_forever > 3 * waited  # what the model stated when the seats never came back
