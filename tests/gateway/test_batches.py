"""Batches: OpenAI's Batch API (``/v1/files`` + ``/v1/batches``) and Anthropic's
Message Batches (``/v1/messages/batches``) with the official SDKs, in process. Requests are
answered by their endpoint, run on the modeled batch pool (results when it is done, the wait
scaled by ``[batches] time_scale``), billed at its derived price, owned by the key."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from fastmode.backends.batch_pool import BatchPool
from fastmode.gateway.app import create_app
from fastmode.gateway.config import load_config

KEYS = '[auth]\nenabled = true\n[[auth.keys]]\nkey = "ka"\n[[auth.keys]]\nkey = "kb"\n'


async def make_app(tmp_path, time_scale: float) -> Any:
    cfg = tmp_path / "c.toml"
    cfg.write_text(KEYS + f"[batches]\ntime_scale = {time_scale}\n")
    config = load_config(cfg)
    config = config.model_copy(update={"state": config.state.model_copy(
        update={"path": str(tmp_path / "l.db")})})
    return create_app(config)


@pytest.fixture
async def app(tmp_path) -> AsyncIterator[Any]:
    application = await make_app(tmp_path, 0.02)  # 1 modeled s = 20 ms
    ctx = application.router.lifespan_context(application)
    await ctx.__aenter__()
    yield application
    await ctx.__aexit__(None, None, None)


def oai(app: Any, key: str = "ka") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://t/v1", api_key=key, http_client=httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app)))


def line(i: int, url: str = "/v1/chat/completions", **body: Any) -> str:
    return json.dumps({"custom_id": f"r{i}", "method": "POST", "url": url, "body": {
        "model": "frontier", "max_tokens": 60, "seed": i,
        "messages": [{"role": "user", "content": f"Explain caches, part {i}"}], **body}})


async def until(fetch: Any, done: Any, timeout: float = 20.0) -> Any:
    for _ in range(int(timeout / 0.02)):
        item = await fetch()
        if done(item):
            return item
        await asyncio.sleep(0.02)
    raise AssertionError(f"not done: {item}")


def test_the_pool_runs_slots_at_once_and_derives_a_cheaper_price() -> None:
    spec = load_config()
    from fastmode.backends.engine import build

    dep = build(spec.sim()).tiers["standard"].deployment
    pool = BatchPool(dep.placement, 1024, 8192, 1500, 1000, slots=2)
    step = pool.step_seconds()
    ends = pool.finish_times([(100, 9)] * 4)
    assert ends == pytest.approx([10 * step, 10 * step, 20 * step, 20 * step])
    # a larger batch than the standard pool: each token cheaper, each step longer
    factor = pool.cost_per_token() / dep.cost_per_token
    assert 0.25 < factor < 0.6
    assert step > dep.placement.step_seconds(1, 4000)


async def test_openai_batch_runs_on_the_pool_and_is_billed_at_its_price(app) -> None:
    client = oai(app)
    data = "\n".join([line(i) for i in range(4)] + [line(9, model="nope")]).encode()
    f = await client.files.create(file=("in.jsonl", data), purpose="batch")
    assert f.purpose == "batch" and f.bytes == len(data)
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                        completion_window="24h", metadata={"run": "t1"})
    assert batch.status == "in_progress" and batch.request_counts.total == 5
    assert batch.request_counts.completed == 0  # nothing before the pool ran it
    done = await until(lambda: client.batches.retrieve(batch.id),
                       lambda b: b.status == "completed")
    assert (done.request_counts.completed, done.request_counts.failed) == (4, 1)
    assert done.metadata == {"run": "t1"}
    out = [json.loads(x) for x in (await client.files.content(done.output_file_id)).text
           .splitlines()]
    assert sorted(x["custom_id"] for x in out) == ["r0", "r1", "r2", "r3"]
    standard = app.state.gateway.spec.tiers["standard"].prices
    factor = app.state.batches.factor("frontier")
    for x in out:
        body = x["response"]["body"]
        assert x["response"]["status_code"] == 200 and body["object"] == "chat.completion"
        u = body["usage"]
        assert u["cost_usd"] == pytest.approx(
            factor * standard.cost(u["prompt_tokens"], 0, u["completion_tokens"]))
        assert body["time_info"]["total_time"] > 0  # modeled on the pool
    errors = (await client.files.content(done.error_file_id)).text.splitlines()
    err = json.loads(errors[0])
    assert err["custom_id"] == "r9" and err["response"]["status_code"] == 404
    # the same answers, seeded, as the endpoint itself gives
    live = await client.chat.completions.create(**json.loads(line(0))["body"])
    assert live.choices[0].message.content == out[[x["custom_id"] for x in out].index("r0")][
        "response"]["body"]["choices"][0]["message"]["content"]
    rows = [r for r in await app.state.gateway.state.usage_rows() if r.tier_served == "batch"]
    assert len(rows) == 4 and all(r.transport == "batch" for r in rows)
    assert [b.id for b in (await client.batches.list()).data] == [batch.id]


async def test_a_bad_file_fails_validation_and_a_cancel_stops_the_rest(tmp_path) -> None:
    slow = await make_app(tmp_path, 1000.0)  # never done within the test
    ctx = slow.router.lifespan_context(slow)
    await ctx.__aenter__()
    try:
        client = oai(slow)
        bad = await client.files.create(file=("b.jsonl", (line(1) + "\n" + line(
            2, url="/v1/responses")).encode()), purpose="batch")
        failed = await client.batches.create(input_file_id=bad.id, completion_window="24h",
                                             endpoint="/v1/chat/completions")
        assert failed.status == "failed" and failed.errors.data[0].line == 2
        assert failed.errors.data[0].code == "mismatched_endpoint"
        good = await client.files.create(file=("g.jsonl", line(1).encode()), purpose="batch")
        running = await client.batches.create(input_file_id=good.id, completion_window="24h",
                                              endpoint="/v1/chat/completions")
        cancelled = await client.batches.cancel(running.id)
        assert cancelled.status == "cancelled" and cancelled.request_counts.completed == 0
        lines = (await client.files.content(cancelled.error_file_id)).text.splitlines()
        assert json.loads(lines[0])["error"]["code"] == "batch_cancelled"
        assert not [r for r in await slow.state.gateway.state.usage_rows()
                    if r.tier_served == "batch"]  # nothing ran: nothing billed
        with pytest.raises(openai.BadRequestError):
            await client.batches.create(input_file_id=good.id, completion_window="1h",
                                        endpoint="/v1/chat/completions")
        with pytest.raises(openai.BadRequestError):
            await client.batches.create(input_file_id=good.id, completion_window="24h",
                                        endpoint="/v1/embeddings")
    finally:
        await ctx.__aexit__(None, None, None)


async def test_files_and_batches_belong_to_their_key(app) -> None:
    a, b = oai(app, "ka"), oai(app, "kb")
    f = await a.files.create(file=("in.jsonl", line(0).encode()), purpose="batch")
    batch = await a.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                   completion_window="24h")
    for call in (lambda: b.files.retrieve(f.id), lambda: b.files.content(f.id),
                 lambda: b.batches.retrieve(batch.id), lambda: b.files.delete(f.id),
                 lambda: b.batches.create(input_file_id=f.id, completion_window="24h",
                                          endpoint="/v1/chat/completions")):
        with pytest.raises(openai.NotFoundError):
            await call()
    assert (await b.files.list()).data == [] and (await b.batches.list()).data == []
    with pytest.raises(openai.AuthenticationError):
        await oai(app, "nobody").files.list()
    assert (await a.files.delete(f.id)).deleted


async def test_uploads_are_bounded(app, monkeypatch) -> None:
    """Files live in memory: one past ``max_file_bytes``, or past ``max_stored_bytes`` in
    all, is a 413 naming the file, never an unbounded heap."""
    cfg = app.state.batches.config
    monkeypatch.setattr(app.state.batches, "config", cfg.model_copy(update={
        "max_file_bytes": 4000, "max_stored_bytes": 6000}))
    client = oai(app)
    with pytest.raises(openai.APIStatusError) as e:
        await client.files.create(file=("big.jsonl", b"x" * 5000), purpose="batch")
    assert e.value.status_code == 413 and e.value.body["param"] == "file"
    await client.files.create(file=("a.jsonl", b"x" * 3500), purpose="batch")
    with pytest.raises(openai.APIStatusError) as e:
        await client.files.create(file=("b.jsonl", b"x" * 3500), purpose="batch")
    assert e.value.status_code == 413 and e.value.body["code"] == "storage_full"
    with pytest.raises(openai.BadRequestError):
        await client.files.create(file=("c.jsonl", b"{}"), purpose="nonsense")


async def test_anthropic_message_batches(app) -> None:
    client = anthropic.AsyncAnthropic(base_url="http://t", api_key="ka",
                                      http_client=httpx2.AsyncClient(
                                          transport=httpx2.ASGITransport(app=app)))
    params = {"model": "frontier", "max_tokens": 50,
              "messages": [{"role": "user", "content": "Name three rivers"}]}
    batch = await client.messages.batches.create(requests=[
        {"custom_id": "a", "params": params}, {"custom_id": "b", "params": params},
        {"custom_id": "bad", "params": {**params, "max_tokens": 0}}])
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 2
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.batches.delete(batch.id)  # not ended yet
    ended = await until(lambda: client.messages.batches.retrieve(batch.id),
                        lambda b: b.processing_status == "ended")
    assert (ended.request_counts.succeeded, ended.request_counts.errored) == (2, 1)
    results = {r.custom_id: r.result async for r in await client.messages.batches.results(
        batch.id)}
    assert results["a"].type == "succeeded" and results["a"].message.content[0].text
    assert results["bad"].type == "errored"
    other = anthropic.AsyncAnthropic(base_url="http://t", api_key="kb",
                                     http_client=httpx2.AsyncClient(
                                         transport=httpx2.ASGITransport(app=app)))
    with pytest.raises(anthropic.NotFoundError):
        await other.messages.batches.retrieve(batch.id)
    assert (await client.messages.batches.delete(batch.id)).type == "message_batch_deleted"
