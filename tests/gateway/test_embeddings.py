"""``POST /v1/embeddings`` with the official openai SDK: deterministic
vectors, similar texts closer than unrelated ones, ``dimensions`` and ``encoding_format`` as
the API has them, OpenAI's errors, usage priced and held for the modeled prefill time."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from fastmode.backends.embeddings import EmbeddingPool, cosine, embed, shortened
from fastmode.backends.tokenizer import count_tokens
from fastmode.gateway.app import create_app
from fastmode.gateway.config import default_config_text, load_config
from fastmode.gateway.endpoints import embeddings as embeddings_module

SIMILAR = ["The cat sat on the mat.", "A cat was sitting on the mat."]
UNRELATED = "Quarterly revenue grew by ten percent in Europe."


@pytest.fixture
async def app(tmp_path) -> AsyncIterator[Any]:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[auth]\nenabled = true\n[[auth.keys]]\nkey = "k1"\n'
                   '[admin]\nenabled = true\nkey = "adm"\n')
    config = load_config(cfg)
    config = config.model_copy(update={"state": config.state.model_copy(
        update={"path": str(tmp_path / "l.db")})})
    application = create_app(config)
    ctx = application.router.lifespan_context(application)
    await ctx.__aenter__()
    yield application
    await ctx.__aexit__(None, None, None)


def sdk(app: Any, key: str = "k1") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://t/v1", api_key=key, http_client=httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app)))


async def test_vectors_are_deterministic_and_similar_texts_are_closer(app) -> None:
    client = sdk(app)
    r = await client.embeddings.create(model="text-embedding-3-small",
                                       input=[*SIMILAR, UNRELATED, SIMILAR[0]])
    assert r.object == "list" and r.model == "text-embedding-3-small"
    vecs = [d.embedding for d in r.data]
    assert [d.index for d in r.data] == [0, 1, 2, 3] and len(vecs[0]) == 1536
    assert vecs[0] == vecs[3]  # same text, same vector
    assert all(math.isclose(cosine(v, v), 1.0, rel_tol=1e-6) for v in vecs)  # unit length
    assert cosine(vecs[0], vecs[1]) > 0.3 > abs(cosine(vecs[0], vecs[2]))
    again = await client.embeddings.create(model="text-embedding-3-small", input=SIMILAR[0])
    assert again.data[0].embedding == pytest.approx(vecs[0], abs=1e-7)  # across requests
    large = await client.embeddings.create(model="text-embedding-3-large", input=SIMILAR[0])
    assert len(large.data[0].embedding) == 3072


async def test_dimensions_shorten_and_base64_is_little_endian_float32(app) -> None:
    client = sdk(app)
    full = (await client.embeddings.create(model="text-embedding-3-large",
                                           input=SIMILAR[0])).data[0].embedding
    short = (await client.embeddings.create(model="text-embedding-3-large", input=SIMILAR[0],
                                            dimensions=256)).data[0].embedding
    assert len(short) == 256
    assert short == pytest.approx(shortened(full, 256), abs=1e-6)  # OpenAI's shortening
    raw = await client.embeddings.with_raw_response.create(
        model="text-embedding-3-small", input=SIMILAR[0], encoding_format="base64")
    b64 = raw.http_response.json()["data"][0]["embedding"]
    assert isinstance(b64, str)
    decoded = struct.unpack("<1536f", base64.b64decode(b64))
    assert decoded == pytest.approx(embed(SIMILAR[0], 1536), abs=1e-6)
    floats = await client.embeddings.create(model="text-embedding-3-small", input=SIMILAR[0],
                                            encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(decoded, abs=1e-6)


async def test_token_id_inputs(app) -> None:
    client = sdk(app)
    one = await client.embeddings.create(model="text-embedding-3-small", input=[11, 22, 33])
    many = await client.embeddings.create(model="text-embedding-3-small",
                                          input=[[11, 22, 33], [44, 55]])
    assert one.usage.prompt_tokens == 3 and many.usage.prompt_tokens == 5
    assert many.data[0].embedding == pytest.approx(one.data[0].embedding, abs=1e-7)


async def test_usage_is_priced_held_for_the_modeled_time_and_in_the_ledger(
        app, monkeypatch) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(embeddings_module, "hold", sleep)
    served = app.state.embeddings["text-embedding-3-small"]
    text = "word " * 5000
    r = await sdk(app).embeddings.create(model="text-embedding-3-small",
                                         input=[text, text, SIMILAR[0]])
    tokens = 2 * count_tokens(text) + count_tokens(SIMILAR[0])
    assert r.usage.prompt_tokens == r.usage.total_tokens == tokens
    assert r.usage.model_extra["cost_usd"] == pytest.approx(tokens * served.price / 1e6,
                                                             abs=1e-9)
    pool: EmbeddingPool = served.pool
    assert tokens > pool.batch_tokens  # two packed steps
    # held until the modeled steps are done (less what computing the vectors took)
    assert waits and waits[0] <= pool.seconds(tokens) == pytest.approx(2 * pool.step_seconds())
    await sdk(app).embeddings.create(model="text-embedding-3-small", input="hi")
    assert 0 < waits[1] <= pool.seconds(1) == pool.step_seconds()
    # priced below the chat tiers' input, above zero: the reference margin on a small model
    standard = app.state.gateway.spec.tiers["standard"].prices.input
    assert 0 < served.price < standard / 10
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as c:
        usage = (await c.get("/v1/usage", headers={"authorization": "Bearer k1"})).json()
    (row,) = [d for d in usage["data"] if d["tier"] == "embeddings"]
    assert row["requests"] == 2 and row["output_tokens"] == 0
    assert row["input_tokens"] == tokens + count_tokens("hi")


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"model": "text-embedding-3-small", "input": ""}, 400, "input"),
    ({"model": "text-embedding-3-small", "input": []}, 400, "input"),
    ({"model": "text-embedding-3-small", "input": ["a", ""]}, 400, "input"),
    ({"model": "text-embedding-3-small", "input": ["a"] * 2049}, 400, "input"),
    ({"model": "text-embedding-3-small", "input": "word " * 9000}, 400, "input"),
    ({"model": "text-embedding-3-small", "input": "a", "dimensions": 4000}, 400, "dimensions"),
    ({"model": "text-embedding-3-small", "input": "a", "dimensions": 0}, 400, "dimensions"),
    ({"model": "text-embedding-ada-002", "input": "a", "dimensions": 256}, 400, "dimensions"),
    ({"model": "text-embedding-3-small", "input": "a", "encoding_format": "int8"}, 400,
     "encoding_format"),
    ({"model": "text-embedding-3-small", "input": {"x": 1}}, 400, "input"),
    ({"model": "frontier", "input": "a"}, 404, "model"),
    ({"input": "a"}, 400, "model"),
])
async def test_bad_requests_are_openai_errors(app, body, status, param) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as c:
        r = await c.post("/v1/embeddings", json=body, headers={"authorization": "Bearer k1"})
        assert r.status_code == status, r.text
        assert r.json()["error"]["param"] == param
        nokey = await c.post("/v1/embeddings", json={"model": "text-embedding-3-small",
                                                     "input": "a"})
        assert nokey.status_code == 401 and nokey.json()["error"]["code"] == "invalid_api_key"
        bad = await c.post("/v1/embeddings", content=b"{nope",
                           headers={"authorization": "Bearer k1"})
        assert bad.status_code == 400 and "error" in bad.json()


def test_the_default_serves_openais_three_ids() -> None:
    models = load_config().embeddings.models
    assert {m: c.dimensions for m, c in models.items()} == {
        "text-embedding-3-small": 1536, "text-embedding-3-large": 3072,
        "text-embedding-ada-002": 1536}
    assert "[embeddings]" in default_config_text()
