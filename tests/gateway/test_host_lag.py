"""Host lag through the gateway: a held event loop is latency, counted once, never a
reader's lag, logged at most once a minute, and on the dashboard.

The loop is held deterministically (``time.sleep``) in the middle of a spark stream, from the
engine's step (push mode: the turn writes its events there) or from the reader (the turn's own
loop). ``server.stream_max_lag_s`` is set below the stall: a host that served the replica late
must not cut a reader that kept up (before the slip, the replica's catch-up counted as the
reader's lag and cut it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from prometheus_client import generate_latest

from fastmode.gateway import protocols
from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, default_config_text, load_config
from fastmode.gateway.observe.host_lag import WARN_EVERY_S, HostLag
from fastmode.gateway.pipeline.turn import Turn
from fastmode.gateway.protocols.base import RequestContext
from fastmode.gateway.state import COMPLETED

STALL = 0.25
TOKENS = 200
MAX_LAG = 0.1  # below the stall
REPLY = " ".join(["word"] * (TOKENS + 20))


def config(tmp_path) -> Config:
    text = default_config_text()
    assert "stream_max_lag_s = 30" in text
    text = text.replace("stream_max_lag_s = 30", f"stream_max_lag_s = {MAX_LAG}", 1)
    text += f'\n[[scripts]]\nmatch = "^lag test"\nreply = "{REPLY}"\n'
    path = tmp_path / "lag.toml"
    path.write_text(text)
    return load_config(path)


@pytest.fixture
async def app(tmp_path) -> AsyncIterator[Any]:
    app = create_app(config(tmp_path))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    try:
        yield app
    finally:
        await ctx.__aexit__(None, None, None)


async def started(app: Any) -> Turn:
    proto = protocols.ENDPOINTS["/chat/completions"]
    body = {"model": "frontier-spark", "stream": True, "max_tokens": TOKENS,
            "messages": [{"role": "user", "content": "lag test"}]}
    turn = Turn(app.state.gateway, proto, proto.validate(body),
                RequestContext({}, False, app.state.responses))
    await turn.start()
    return turn


def lag_buckets(app: Any) -> dict[str, float]:
    """``fastmode_host_lag_seconds`` of the spark deployment: bucket bound -> count, sum."""
    out = {}
    for line in generate_latest(app.state.gateway.metrics.registry).decode().splitlines():
        if line.startswith("fastmode_host_lag_seconds") and 'deployment="spark"' in line:
            name, value = line.rsplit(" ", 1)
            key = name.split('le="')[1].split('"')[0] if 'le="' in name else name.split("{")[0]
            out[key] = float(value)
    return out


def sse_events(chunks: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in b"".join(chunks).split(b"\n")
            if line.startswith(b"data: {")]


async def stream_with_a_stall(turn: Turn, pushed: bool, stalls: int = 1) -> list[bytes]:
    """The turn's SSE bytes, the event loop held ``STALL`` s after each quarter of the reply
    (``stalls`` times): inside the engine's step (push mode) or in the reader."""
    enc = turn.encoder
    assert enc is not None
    sent: list[bytes] = []
    marks = [TOKENS * (k + 1) // 4 for k in range(stalls)]

    def hold(upto: int) -> None:
        if marks and upto >= marks[0]:
            marks.pop(0)
            time.sleep(STALL)

    async def write(body: bytes) -> None:
        sent.append(body)

    def push(start: int, count: int, lead: bytes | None) -> Coroutine[Any, Any, None]:
        hold(start + count)  # inside the replica's step: the whole loop waits
        return write((lead or b"") + enc.sse_tokens(start, count))

    async for chunk in turn.sse(push if pushed else None):
        sent.append(chunk)
        if not pushed:
            assert turn.job is not None
            hold(turn.job.stream.delivered)
    return sent


@pytest.mark.parametrize("pushed", [True, False], ids=["push-mode", "turn-loop"])
async def test_a_held_loop_is_latency_counted_once_and_never_the_readers_lag(
        app: Any, pushed: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fastmode.engine")
    turn = await started(app)
    sent = await stream_with_a_stall(turn, pushed)
    job = turn.job
    assert job is not None
    assert job.ended == COMPLETED and job.billed_output == TOKENS  # not cut as lagging
    assert sent[-1].endswith(b"data: [DONE]\n\n")
    # the stall shows once in the metric: one slip of about its length
    b = lag_buckets(app)
    assert b["+Inf"] - b["0.1"] == 1
    assert b["fastmode_host_lag_seconds_sum"] >= STALL - 0.05
    # ... and in time_info: the model's timeline moved by the slips (a client measuring the
    # stream sees what time_info says)
    info = next(e["time_info"] for e in sse_events(sent) if "time_info" in e)
    seq = job.stream.seq
    assert info["completion_time"] == pytest.approx(seq.finished_at - seq.first_token_at)
    assert info["completion_time"] >= STALL
    # time_info says how much of that the host added: taken out, the model's own times are
    # those of the same request served without a stall
    assert info["completion_host_lag_time"] >= STALL - 0.05
    assert info["host_lag_time"] >= info["completion_host_lag_time"]
    calm = await started(app)
    calm_sent = [chunk async for chunk in calm.sse()]
    calm_info = next(e["time_info"] for e in sse_events(calm_sent) if "time_info" in e)
    assert (info["completion_time"] - info["completion_host_lag_time"]) == pytest.approx(
        calm_info["completion_time"] - calm_info["completion_host_lag_time"], rel=0.05)
    # one warning, naming the tier and what to do
    warnings = [r.getMessage() for r in caplog.records if "host lag" in r.getMessage()]
    assert len(warnings) == 1
    assert "tier spark" in warnings[0]
    assert "stream_interval" in warnings[0] and "--workers" in warnings[0]


async def test_the_warning_comes_at_most_once_a_minute(app: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fastmode.engine")
    turn = await started(app)
    await stream_with_a_stall(turn, pushed=True, stalls=3)
    b = lag_buckets(app)
    assert b["+Inf"] - b["0.1"] == 3  # every stall counted, once each
    assert len([r for r in caplog.records if "host lag" in r.getMessage()]) == 1


def test_the_warning_summarises_the_slips_since_the_last_one() -> None:
    """With a clock of its own: a warning at the first slip, none within a minute, then one
    that counts what happened in between, per tier."""
    from fastmode.gateway.observe.metrics import Metrics

    now = [0.0]
    spark = SimpleNamespace(name="spark", deployment=SimpleNamespace(name="spark"))
    gateway = SimpleNamespace(metrics=Metrics(lambda: []),
                              spec=SimpleNamespace(tiers={"spark": spark}))
    lag = HostLag(gateway, clock=lambda: now[0])
    replica = SimpleNamespace(deployment="spark")
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("fastmode.engine")
    logger.addHandler(handler)
    try:
        for t, seconds in ((0.0, 0.01), (10.0, 0.02), (30.0, 0.03), (WARN_EVERY_S + 1, 0.5)):
            now[0] = t
            lag.lagged(replica, seconds)  # type: ignore[arg-type]
    finally:
        logger.removeHandler(handler)
    assert len(logged) == 2
    assert "1 slip(s), 10 ms" in logged[0]
    assert "since the last warning" in logged[1] and "3 slip(s), 550 ms" in logged[1]
    assert "the longest 500 ms" in logged[1]


async def test_the_dashboard_shows_the_host_lag_of_the_pool_and_its_tier(app: Any) -> None:
    dashboard = app.state.dashboard
    before = dashboard.snapshot()
    assert before["pools"]["spark"]["host_lag_s"] == 0
    turn = await started(app)
    await stream_with_a_stall(turn, pushed=True)
    await asyncio.sleep(0)
    after = dashboard.snapshot()
    pool = after["pools"]["spark"]
    assert pool["host_lag_slips"] >= 1 and pool["host_lag_s"] >= STALL - 0.05
    assert after["tiers"]["spark"]["host_lag_s"] == pool["host_lag_s"]
    assert pool["host_lag_total_s"] >= pool["host_lag_s"]
    assert after["pools"]["standard"]["host_lag_s"] == 0  # its replicas were not serving
