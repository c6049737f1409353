"""The Redis state backend against a real ``redis-server`` (Debian's package; ``make test``
installs it, scripts/system_deps.sh). Two backends on one Redis behave as two gateways: buckets exact in total, responses
continued across, usage summed, settings propagated; then two real `fastmode serve` processes
sharing one Redis, driven with the official openai SDK.

Without the redis-server binary every test fails, saying what to install: a missing dependency
never passes for a green run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import redis
from conftest import free_port

from fastmode.gateway.config import default_config_text
from fastmode.gateway.state import StoredResponse, UsageRow
from fastmode.gateway.state.health import StateUnavailable
from fastmode.gateway.state.redis_backend import RedisState

REDIS = shutil.which("redis-server")


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    """A private redis-server on a free loopback port (its files in ``directory``), stopped
    at the end; yields its URL. Shared with the other modules that need a real Redis."""
    if REDIS is None:
        pytest.fail("redis-server is not installed: `make test` installs it "
                    "(scripts/system_deps.sh; by hand: apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(directory)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    import redis

    client = redis.Redis(port=port)
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.02)
    client.close()
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server for one test."""
    with redis_server(tmp_path) as url:
        yield url


def row(i: int, key: str = "k1", tier: str | None = "fast", out: int = 10) -> UsageRow:
    return UsageRow(f"req-{i}", time.time(), key, "frontier", "fast", tier, "chat", "http",
                    200 if tier else 429, "completed" if tier else "rejected",
                    input_tokens=20, cached_input_tokens=5, output_tokens=out,
                    cost_usd=0.001 * out)


async def two(url: str) -> tuple[RedisState, RedisState]:
    a, b = RedisState(url, flush_interval_s=0.05), RedisState(url, flush_interval_s=0.05)
    await a.start()
    await b.start()
    return a, b


async def test_bucket_is_exact_across_processes(redis_url: str) -> None:
    a, b = await two(redis_url)
    try:
        want = [("ratelimit|k|fast|requests", 1, 10 / 60, 10)]
        granted = [(await s.take_all_async(want, 0.0))[0].allowed
                   for _ in range(15) for s in (a, b)]
        assert sum(granted) == 10  # a key limited to 10 per minute gets 10, not 10 each
        refused = (await a.take_all_async(want, 0.0))[0]
        assert not refused.allowed and 0 < refused.retry_after_s <= 6.5
    finally:
        await a.close()
        await b.close()


async def test_several_buckets_are_taken_all_or_nothing(redis_url: str) -> None:
    """A key's requests and tokens per minute, from two processes: a request the tokens bucket
    refuses spends nothing from the requests bucket, and together they never overspend."""
    a, b = await two(redis_url)
    wants = [("ratelimit|{k|fast}|requests", 1, 10 / 60, 10),
             ("ratelimit|{k|fast}|tokens", 300, 1000 / 60, 1000)]
    try:
        results = [await s.take_all_async(wants, 0.0) for _ in range(3) for s in (a, b)]
        granted = [all(t.allowed for t in r) for r in results]
        assert sum(granted) == 3  # 3 x 300 tokens fit in 1,000; the 4th does not
        refused = results[granted.index(False)]
        requests, tokens = refused
        assert not tokens.allowed and tokens.retry_after_s > 0
        assert requests.retry_after_s == 0  # this bucket had room: it is not why
        # the refused requests spent nothing: 7 of 10 requests left, 100 tokens
        left = await a.take_all_async([(wants[0][0], 0, 10 / 60, 10),
                                       (wants[1][0], 0, 1000 / 60, 1000)], 0.0)
        assert left[0].remaining == pytest.approx(7, abs=0.1)
        assert left[1].remaining == pytest.approx(100, abs=1)
    finally:
        await a.close()
        await b.close()


async def test_a_read_that_misses_waits_for_a_write_on_its_way(redis_url: str) -> None:
    """A continuation can reach gateway b before gateway a's write of the response reached
    Redis: b's read waits for it (asks again) instead of failing; an id nobody stores is a
    miss after the bounded wait (~1 s), not a hang."""
    a, b = await two(redis_url)
    try:
        item = StoredResponse("resp_late", "frontier", [{"role": "user", "content": "x"}], 7)
        asyncio.get_running_loop().call_later(0.1, a.put_response, item)  # written 0.1 s on
        got = await asyncio.wait_for(b.get_response("resp_late"), 5)
        assert got is not None and got.context_tokens == 7
        t0 = time.monotonic()
        assert await asyncio.wait_for(b.get_response("resp_nobody"), 5) is None
        assert 0.9 <= time.monotonic() - t0 < 3
    finally:
        await a.close()
        await b.close()


async def test_close_with_a_round_under_way_returns_and_loses_nothing(redis_url: str) -> None:
    """close() lets the background round under way end instead of cancelling a Redis command
    halfway (redis-py then waits on that connection until the server drops it: a test run
    hung 20 minutes in close()). With no pause between rounds one is always under way."""
    for i in range(30):
        s = RedisState(redis_url, flush_interval_s=0.0)
        await s.start()
        s.append_usage(row(i))
        for _ in range(i % 5):  # close at a different point of the round each time
            await asyncio.sleep(0)
        await asyncio.wait_for(s.close(), 5)
    reader = RedisState(redis_url)
    await reader.start()
    try:
        assert sorted(r.request_id for r in await reader.usage_rows()) == sorted(
            f"req-{i}" for i in range(30))
    finally:
        await reader.close()


async def test_responses_usage_and_settings_are_shared(redis_url: str) -> None:
    a, b = await two(redis_url)
    try:
        a.put_response(StoredResponse("resp_1", "frontier", [{"role": "user", "content": "x"}],
                                      42))
        await asyncio.sleep(0)  # the write starts at once, not at the next flush
        for _ in range(100):
            got = await b.get_response("resp_1")
            if got is not None:
                break
            await asyncio.sleep(0.01)
        assert got is not None and got.context_tokens == 42 and b.cached_response("resp_1")
        for i in range(3):
            a.append_usage(row(i))
        b.append_usage(row(3, out=30))
        b.append_usage(row(4, tier=None))  # a rejection: in the rows, not in the totals
        await a.flush()
        totals = await b.usage_totals()
        assert [(t.api_key, t.tier, t.requests, t.output_tokens, t.cached_input_tokens)
                for t in totals] == [("k1", "fast", 4, 60, 20)]
        assert totals[0].cost_usd == pytest.approx(0.06)
        assert len(await a.usage_rows()) == 5
        day = await a.usage_totals(per_day=True)
        assert day[0].day and day[0].requests == 4
        window = await a.usage_totals(since=time.time() - 60)
        assert window[0].requests == 4 and window[0].output_tokens == 60
        await a.put_setting("faults", "test-1", "rule", {"kind": "503"})
        for _ in range(100):
            if b.settings("faults"):
                break
            await asyncio.sleep(0.01)
        assert b.settings("faults") == {("test-1", "rule"): {"kind": "503"}}
        assert await b.delete_settings("faults", "test-1") == 1
        assert await b.delete_response("resp_1") and await a.get_response("nope") is None
    finally:
        await a.close()
        await b.close()


async def test_reasoning_tokens_are_summed_and_old_rows_still_read(redis_url: str) -> None:
    """Reasoning tokens sum into the totals; a row written before the field existed
    (its JSON without the key) reads back with the default, not a crash or a None."""
    import orjson
    import redis.asyncio

    a, b = await two(redis_url)
    try:
        a.append_usage(dataclasses.replace(row(1), reasoning_tokens=7))
        b.append_usage(dataclasses.replace(row(2), reasoning_tokens=5))
        await b.flush()
        (total,) = await a.usage_totals()
        assert (total.requests, total.reasoning_tokens) == (2, 12)
        old = row(3).as_dict()
        del old["reasoning_tokens"]
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.zadd(a._k("usage"), {orjson.dumps(old): old["ts"]})
        await client.aclose()
        rows = {r.request_id: r for r in await a.usage_rows()}
        assert [rows[f"req-{i}"].reasoning_tokens for i in (1, 2, 3)] == [7, 5, 0]
    finally:
        await a.close()
        await b.close()


def _config(url: str) -> str:
    """The default config with Redis state and a key limited to 6 spark requests a minute."""
    text = default_config_text()
    auth = text.index("[auth]\nenabled = false")
    end = text.index("\n", auth + len("[auth]\n"))
    text = text[:auth] + """[auth]
enabled = true
[[auth.keys]]
key = "sk-limited"
[auth.keys.limits.spark]
requests_per_minute = 6
""" + text[end + 1:]
    state = f'[state]\npath = ":memory:"\nredis_url = "{url}"\nflush_interval_s = 0.05\n'
    if "\n[state]\n" not in text:
        return text + "\n" + state
    start = text.index("\n[state]\n") + 1
    nxt = re.search(r"^\[(?!state\])", text[start + 1:], re.M)  # the next table, if any
    stop = start + 1 + nxt.start() if nxt else len(text)
    return text[:start] + state + "\n" + text[stop:]


def test_two_gateway_processes_share_state(redis_url: str, server_factory) -> None:
    text = _config(redis_url)
    assert "sk-limited" in text
    g1, g2 = server_factory(config_text=text), server_factory(config_text=text)
    c1, c2 = (openai.OpenAI(base_url=u + "/v1", api_key="sk-limited", max_retries=0,
                            timeout=30) for u in (g1, g2))
    # limits: 6 per minute in total, whichever gateway takes the request
    ok = 0
    for i in range(10):
        client = (c1, c2)[i % 2]
        try:
            client.chat.completions.create(model="frontier-spark", max_completion_tokens=3,
                                           messages=[{"role": "user", "content": "hi"}])
            ok += 1
        except openai.RateLimitError:
            pass
    assert ok == 6
    # a response stored on gateway 1 is continued at once on gateway 2 (standard tier: no
    # limit); it reaches Redis a moment after its answer (a writer task, off the request's
    # path), and gateway 2 waits for it rather than failing the continuation
    first = c1.responses.create(model="frontier", input="Remember: blue.", max_output_tokens=8)
    second = c2.responses.create(model="frontier", input="What colour?", max_output_tokens=8,
                                 previous_response_id=first.id)
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens == (
        first.usage.input_tokens + first.usage.output_tokens)
    # usage: either gateway reports the sum of both (after their flush interval)
    deadline = time.monotonic() + 10
    while True:
        rows = httpx.get(g2 + "/v1/usage", headers={"authorization": "Bearer sk-limited"},
                         timeout=5).json()["data"]
        n = sum(r["requests"] for r in rows)
        if n == 8 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert n == 8, rows  # 6 spark + 2 standard, from both processes
    assert {r["tier"] for r in rows} == {"spark", "standard"}


async def test_a_batch_applied_but_reported_failed_is_counted_once(redis_url: str) -> None:
    """Redis ran the ledger's transaction, but its reply was lost (a timeout, a dropped
    connection): the batch is retried at the next flush, and must not add its totals twice."""
    state = RedisState(redis_url, flush_interval_s=60)  # no background flush
    await state.start()
    call = state.link.call
    lost = [1]  # the next flush's reply is lost after Redis applied it

    async def reply_lost(op: str, fn):  # type: ignore[no-untyped-def]
        result = await call(op, fn)
        if op == "flush" and lost:
            lost.pop()
            raise state.health.failed(op, redis.exceptions.TimeoutError("reply lost"))
        return result

    state.link.call = reply_lost  # type: ignore[method-assign]
    try:
        for i in range(3):
            state.append_usage(row(i, out=10))
        with pytest.raises(StateUnavailable):
            await state.flush()
        assert state.rows_pending == 3  # not known to be written
        state.health.answered()  # the outage is over
        state.append_usage(row(3, out=10))
        await state.flush()
        assert state.rows_pending == 0 and state.rows_written == 4
        [total] = await state.usage_totals()
        assert (total.requests, total.output_tokens) == (4, 40)
        assert sorted(r.request_id for r in await state.usage_rows()) == [
            "req-0", "req-1", "req-2", "req-3"]
        for i in range(4, 7):  # more batches: still one key per process, not one per batch
            state.append_usage(row(i, out=10))
            await state.flush()
        assert len(await state.link.slow.keys(state.key("ledger-batch", "*"))) == 1
    finally:
        state.link.call = call  # type: ignore[method-assign]
        await state.close()
