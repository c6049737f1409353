"""The usage ledger and the shared state (gateway.state): one row per request, totals per key
and tier, written off the hot path, and nothing lost to a kill -9 that finished a second
before it."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from conftest import quick_config_text
from test_openai_sdk import USER

from fastmode.gateway.app import create_app
from fastmode.gateway.config import default_config_text, load_config
from fastmode.gateway.state import SQLiteState, StoredResponse, UsageRow
from fastmode.gateway.stored.ownership import key_id

ADMIN = """
[admin]
enabled = true
key = "adm"
"""


def row(i: int, key: str = "k1", tier: str = "standard", ts: float = 1.7e9, **kw) -> UsageRow:
    base = dict(request_id=f"req-{i}", ts=ts, api_key=key, model="frontier",
                tier_requested=tier, tier_served=tier, protocol="chat", transport="http",
                status=200, ended="completed", input_tokens=10, cached_input_tokens=2,
                output_tokens=5, cost_usd=0.001)
    base.update(kw)
    return UsageRow(**base)  # type: ignore[arg-type]


# -- the SQLite backend ---------------------------------------------------------------------

async def test_rows_are_batched_and_totalled_per_key_tier_and_day(tmp_path) -> None:
    state = SQLiteState(tmp_path / "s.db", flush_interval_s=60)  # no background flush
    await state.start()
    state.append_usage(row(1))
    state.append_usage(row(2, ts=1.7e9 + 86400))
    state.append_usage(row(3, key="k2", tier="fast", output_tokens=7))
    state.append_usage(row(4, tier_served=None, ended="rejected", status=429))
    assert state.rows_written == 0  # nothing on disk yet: buffered
    totals = {(t.api_key, t.tier): t for t in await state.usage_totals()}
    assert state.rows_written == 4
    assert totals["k1", "standard"].requests == 2  # the rejection is not usage
    assert totals["k1", "standard"].output_tokens == 10
    assert totals["k2", "fast"].output_tokens == 7
    days = await state.usage_totals(per_day=True, api_key="k1")
    assert [(t.day, t.requests) for t in days] == [("2023-11-14", 1), ("2023-11-15", 1)]
    rows = await state.usage_rows()
    assert [r.request_id for r in rows] == ["req-1", "req-2", "req-3", "req-4"]
    await state.close()
    again = SQLiteState(tmp_path / "s.db")
    await again.start()
    assert len(await again.usage_rows()) == 4  # durable
    await again.close()


async def test_buckets_refill_and_refuse_atomically(tmp_path) -> None:
    state = SQLiteState(tmp_path / "s.db")
    take = state.take
    assert take("b", 3, rate_per_s=1.0, burst=3, now=0.0).allowed
    refused = take("b", 1, 1.0, 3, now=0.0)
    assert not refused.allowed and refused.retry_after_s == pytest.approx(1.0)
    ok = take("b", 1, 1.0, 3, now=1.0)
    assert ok.allowed and ok.remaining == pytest.approx(0.0)
    assert take("b", 2, 1.0, 3, now=10.0).remaining == pytest.approx(1.0)  # capped at burst
    assert take("b", 5, 1.0, 3, now=20.0).retry_after_s == float("inf")  # never fits


async def test_responses_and_settings_round_trip(tmp_path) -> None:
    state = SQLiteState(tmp_path / "s.db", response_cache=1)
    await state.start()
    state.put_response(StoredResponse("resp_1", "frontier", [{"role": "user"}], 12))
    state.put_response(StoredResponse("resp_2", "frontier", [], 3))  # evicts resp_1 from memory
    await state.flush()
    assert state.cached_response("resp_1") is None
    got = await state.get_response("resp_1")  # from the file
    assert got is not None and got.context_tokens == 12
    assert state.cached_response("resp_1") is not None
    assert await state.delete_response("resp_1") and not await state.delete_response("resp_1")
    await state.put_setting("faults", "t1", "a", {"kind": "500"})
    await state.put_setting("faults", "", "b", {"kind": "429"})
    assert state.settings("faults", "t1") == {("t1", "a"): {"kind": "500"}}
    assert await state.delete_settings("faults", "t1") == 1
    await state.close()
    again = SQLiteState(tmp_path / "s.db")
    await again.start()
    assert again.settings("faults") == {("", "b"): {"kind": "429"}}
    await again.close()


# -- GET /v1/usage against what the clients received ---------------------------------------

@pytest.fixture
async def app(tmp_path) -> AsyncIterator:
    cfg = tmp_path / "c.toml"
    cfg.write_text(quick_config_text() + ADMIN)  # what is counted, not how fast: quick hardware
    config = load_config(cfg)
    config = config.model_copy(update={"state": config.state.model_copy(
        update={"path": str(tmp_path / "ledger.db")})})
    application = create_app(config)
    ctx = application.router.lifespan_context(application)
    await ctx.__aenter__()
    yield application
    await ctx.__aexit__(None, None, None)


async def test_usage_matches_what_the_clients_received(app) -> None:
    transport = httpx.ASGITransport(app=app)
    sdk = openai.AsyncOpenAI(base_url="http://t/v1", api_key="x",
                             http_client=httpx.AsyncClient(transport=transport))
    seen = {"standard": [0, 0, 0.0], "fast": [0, 0, 0.0]}  # requests, output tokens, cost

    def add(tier: str, out: int, cost: float) -> None:
        seen[tier][0] += 1
        seen[tier][1] += out
        seen[tier][2] += cost

    r = await sdk.chat.completions.create(model="frontier", messages=USER, max_tokens=20)
    add("standard", r.usage.completion_tokens, r.usage.model_extra["cost_usd"])
    stream = await sdk.chat.completions.create(
        model="frontier", messages=USER, max_tokens=20, stream=True,
        stream_options={"include_usage": True}, service_tier="priority")
    async for chunk in stream:
        if chunk.usage is not None:
            add("fast", chunk.usage.completion_tokens, chunk.usage.model_extra["cost_usd"])
    resp = await sdk.responses.create(model="frontier", input="hi", max_output_tokens=20)
    add("standard", resp.usage.output_tokens, resp.usage.model_extra["cost_usd"])
    import httpx2

    ant = anthropic.AsyncAnthropic(base_url="http://t", api_key="x", http_client=httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app)))
    msg = await ant.messages.create(model="frontier", max_tokens=20, messages=USER)
    add("standard", msg.usage.output_tokens, msg.usage.model_extra["cost_usd"])
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        bad = await c.post("/v1/chat/completions", json={"model": "frontier", "messages": USER},
                           headers={"x-fastmode-fault": "429"})
        assert bad.status_code == 429
        data = (await c.get("/v1/usage")).json()["data"]
        by_day = (await c.get("/v1/usage", params={"group_by": "day"})).json()["data"]
        assert (await c.get("/v1/usage", params={"group_by": "week"})).status_code == 400
    got = {d["tier"]: d for d in data}
    for tier, (n, out, cost) in seen.items():
        assert got[tier]["requests"] == n
        assert got[tier]["output_tokens"] == out
        assert got[tier]["cost_usd"] == pytest.approx(cost)
        assert set(got[tier]) == {"api_key", "tier", "requests", "input_tokens",
                                  "cached_input_tokens", "output_tokens", "reasoning_tokens",
                                  "cost_usd"}
    assert sum(d["requests"] for d in by_day) == 4 and all("day" in d for d in by_day)
    rows = await app.state.gateway.state.usage_rows()
    assert sorted(r.ended for r in rows) == ["completed"] * 4 + ["rejected"]
    assert {r.protocol for r in rows} == {"chat", "responses", "messages"}


async def test_usage_sums_the_reasoning_tokens_the_clients_were_billed(app) -> None:
    """Reasoning tokens are counted in the ledger as the replies reported them (the
    ledger wrote 0 for every row), on every protocol that thinks."""
    transport = httpx.ASGITransport(app=app)
    sdk = openai.AsyncOpenAI(base_url="http://t/v1", api_key="x",
                             http_client=httpx.AsyncClient(transport=transport))
    thought = 0
    for effort in ("low", "minimal"):
        r = await sdk.chat.completions.create(model="frontier", messages=USER, max_tokens=3000,
                                              reasoning_effort=effort)
        thought += r.usage.completion_tokens_details.reasoning_tokens
    resp = await sdk.responses.create(model="frontier", input="hi", max_output_tokens=3000,
                                      reasoning={"effort": "low"})
    thought += resp.usage.output_tokens_details.reasoning_tokens
    assert thought > 0
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        data = (await c.get("/v1/usage")).json()["data"]
    assert [(d["tier"], d["reasoning_tokens"]) for d in data] == [("standard", thought)]
    rows = await app.state.gateway.state.usage_rows()
    assert all(0 < r.reasoning_tokens <= r.output_tokens for r in rows)


async def test_a_ledger_written_before_a_field_existed_gains_its_column(tmp_path) -> None:
    """An existing SQLite ledger without the ``reasoning_tokens`` column (an older fastmode):
    the column is added with its default, and old and new rows sum together."""
    path = tmp_path / "old.db"
    old_fields = [f for f in row(0).as_dict() if f != "reasoning_tokens"]
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE usage (id INTEGER PRIMARY KEY AUTOINCREMENT, "
               f"{', '.join(old_fields)})")
    old = row(1).as_dict()
    db.execute(f"INSERT INTO usage ({', '.join(old_fields)}) VALUES "
               f"({', '.join('?' * len(old_fields))})", [old[f] for f in old_fields])
    db.commit()
    db.close()
    state = SQLiteState(path)
    await state.start()
    state.append_usage(row(2, reasoning_tokens=3))
    (total,) = await state.usage_totals()
    assert (total.requests, total.reasoning_tokens) == (2, 3)
    assert [r.reasoning_tokens for r in await state.usage_rows()] == [0, 3]
    await state.close()


async def test_with_auth_a_key_sees_only_its_usage(tmp_path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(default_config_text().replace("enabled = false", "enabled = true\n"
                   '[[auth.keys]]\nkey = "ka"\n[[auth.keys]]\nkey = "kb"\n', 1))
    config = load_config(cfg)
    config = config.model_copy(update={"state": config.state.model_copy(
        update={"path": str(tmp_path / "l.db")})})
    application = create_app(config)
    ctx = application.router.lifespan_context(application)
    await ctx.__aenter__()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://t") as c:
            for key in ("ka", "kb", "kb"):
                r = await c.post("/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                                 json={"model": "frontier", "messages": USER, "max_tokens": 3})
                assert r.status_code == 200
            assert (await c.get("/v1/usage")).status_code == 401
            mine = (await c.get("/v1/usage", headers={"authorization": "Bearer kb"})).json()
            # the ledger names a key by its id (a hash), never the key itself
            assert [(d["api_key"], d["requests"]) for d in mine["data"]] == [(key_id("kb"), 2)]
            r = await c.post("/v1/chat/completions", headers={"authorization": "Bearer zz"},
                             json={"model": "frontier", "messages": USER})
            assert r.status_code == 401
            metrics = (await c.get("/metrics")).text
            assert 'fastmode_auth_rejections_total{status="401",tier=""} 2.0' in metrics
    finally:
        await ctx.__aexit__(None, None, None)


# -- kill -9 ----------------------------------------------------------------------------------

def _serve(ledger: Path, tmp: Path) -> tuple[subprocess.Popen, str]:
    from conftest import launch

    return launch("--ledger", str(ledger), config_text=default_config_text() + ADMIN, tmp=tmp)


def test_kill_9_loses_no_request_that_finished_a_second_before(tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    proc, url = _serve(ledger, tmp_path)
    done: list[tuple[float, str, int, int, float]] = []  # (finished at, id, in, out, cost)
    stop = threading.Event()

    def client(i: int) -> None:
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if n % 2:
                    r = sdk.chat.completions.create(model="frontier-spark", messages=USER,
                                                    max_tokens=30 + i)
                    u = r.usage
                    rid = r.id
                else:
                    u, rid = None, ""
                    for chunk in sdk.chat.completions.create(
                            model="frontier-spark", messages=USER, max_tokens=40, stream=True,
                            stream_options={"include_usage": True}):
                        rid = chunk.id
                        u = chunk.usage or u
                assert u is not None
                done.append((time.monotonic(), rid.replace("chatcmpl-", "req-"),
                             u.prompt_tokens, u.completion_tokens, u.model_extra["cost_usd"]))
            except (openai.APIError, AssertionError):
                return  # the server died under us

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    began = time.monotonic()
    deadline = began + 30
    while time.monotonic() < deadline:  # until 30 requests finished more than a second ago
        now = time.monotonic()
        if now > began + 2.5 and sum(d[0] < now - 1.0 for d in done) >= 30:
            break
        time.sleep(0.05)
    killed_at = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stop.set()
    for t in threads:
        t.join(10)
    settled = [d for d in done if d[0] < killed_at - 1.0]
    assert len(settled) >= 30
    # restart on the same ledger: its rows are there and the server goes on appending
    proc, url = _serve(ledger, tmp_path)
    try:
        rows = httpx.get(url + "/admin/ledger", headers={"authorization": "Bearer adm"}).json()
        by_id = {r["request_id"]: r for r in rows["data"]}
        for _, rid, prompt, out, cost in settled:
            r = by_id[rid]
            assert (r["input_tokens"], r["output_tokens"], r["ended"]) == (prompt, out,
                                                                           "completed")
            assert r["cost_usd"] == pytest.approx(cost)
    finally:
        proc.terminate()
        proc.wait(10)
    with sqlite3.connect(ledger) as db:  # the file itself, read by anyone
        assert db.execute("SELECT COUNT(*) FROM usage").fetchone()[0] >= len(settled)


async def test_a_flush_cancelled_mid_write_writes_each_row_once(tmp_path) -> None:
    """close() cancels the writer task, which may be inside a write on the backend's thread:
    the write finishes there, so the flush must not keep its rows for close()'s own flush too
    (found as a graceful shutdown's 2 ledger rows written as 4)."""
    state = SQLiteState(tmp_path / "s.db", flush_interval_s=60)
    await state.start()
    write = state._write
    started = threading.Event()

    def slow_write(rows, responses) -> None:
        started.set()
        time.sleep(0.2)  # the thread is inside the transaction when the flush is cancelled
        write(rows, responses)

    state._write = slow_write  # type: ignore[method-assign]
    for i in range(3):
        state.append_usage(row(i))
    flushing = asyncio.create_task(state.flush())
    while not started.is_set():
        await asyncio.sleep(0.005)
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    assert state.rows_written == 3 and state._rows == []
    state.append_usage(row(3))
    await state.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        ids = [r for (r,) in db.execute("SELECT request_id FROM usage ORDER BY id")]
    assert ids == ["req-0", "req-1", "req-2", "req-3"]
