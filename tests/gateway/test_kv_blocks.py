"""An engine's prefix cache in vLLM's blocks: hashes chained over token ids as vLLM computes
them, the same ids /tokenize answers, hits in whole blocks on a repeated prefix."""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import AsyncIterator

import cbor2
import httpx
import pytest
from conftest import asgi_client

from fastmode.backends.block_hash import BlockHasher, external
from fastmode.gateway.config import load_config
from fastmode.gateway.engine_config import engine_config

LONG = " ".join(f"word{i} of the shared system prompt" for i in range(60))


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": LONG}, {"role": "user", "content": question}]


@pytest.fixture
async def engine() -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(engine_config(load_config(), "spark", replicas=1), "http://e") as client:
        yield client


def cache_of(client: httpx.AsyncClient):
    dep = client.app.state.gateway.deployments["spark"]  # type: ignore[attr-defined]
    return dep.replicas[0].scheduler.cache


def test_hashes_are_vllms_chain() -> None:
    ids = list(range(1000, 1040))
    for algo, fn in (("sha256", lambda v: hashlib.sha256(pickle.dumps(v, protocol=5)).digest()),
                     ("sha256_cbor",
                      lambda v: hashlib.sha256(cbor2.dumps(v, canonical=True)).digest())):
        h = BlockHasher(16, algo, "42")  # type: ignore[arg-type]
        parent = fn("42")
        want = []
        for start in (0, 16):  # two full blocks; the last 8 tokens are no block
            parent = fn((parent, tuple(ids[start:start + 16]), None))
            want.append(parent)
        assert h.digests(ids) == want
        key = h.key(ids)
        assert key is not None and key.points == (16, 32)
        assert key.hashes == tuple(int.from_bytes(d, "big") & (2**64 - 1) for d in want)
        assert external(want[0]) == key.hashes[0]
    # the seed and the algorithm change every hash; a changed token changes its block and after
    a, b = BlockHasher(16, "sha256", "0"), BlockHasher(16, "sha256", "1")
    assert a.digests(ids)[0] != b.digests(ids)[0]
    other = ids[:20] + [7] + ids[21:]
    da, do = a.digests(ids), a.digests(other)
    assert da[0] == do[0] and da[1] != do[1]
    with pytest.raises(ValueError):
        BlockHasher(0)


async def test_engine_blocks_hit_and_match_tokenize(engine) -> None:
    model = (await engine.get("/v1/models")).json()["data"][0]["id"]
    first = messages("What is a block?")
    r = await engine.post("/v1/chat/completions",
                          json={"model": model, "messages": first, "max_tokens": 2})
    assert r.status_code == 200
    prompt = r.json()["usage"]["prompt_tokens"]
    cache = cache_of(engine)
    hasher = engine.app.state.gateway.spec.deployments["spark"].kv_blocks
    assert hasher is not None and hasher.block_size == 16
    ids = (await engine.post("/tokenize", json={"messages": first})).json()["tokens"]
    assert len(ids) == prompt
    expected = {external(d) for d in hasher.digests(ids)}
    stored = set(cache._entries)
    # every full block below the last prompt token is stored, named as a router computes it
    assert stored == {external(d) for d in hasher.digests(ids[:prompt - 1])}
    assert stored <= expected and len(stored) == (prompt - 1) // 16
    # a second question after the same system prompt hits every block the two share
    second = messages("And what is a page?")
    r2 = await engine.post("/v1/chat/completions",
                           json={"model": model, "messages": second, "max_tokens": 2})
    ids2 = (await engine.post("/tokenize", json={"messages": second})).json()["tokens"]
    shared = next(i for i, (x, y) in enumerate(zip(ids, ids2, strict=False)) if x != y)
    cached = r2.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == shared // 16 * 16 and cached > 0


async def test_completions_token_prompt_blocks(engine) -> None:
    model = (await engine.get("/v1/models")).json()["data"][0]["id"]
    prompt = list(range(5000, 5100))
    r = await engine.post("/v1/completions",
                          json={"model": model, "prompt": prompt, "max_tokens": 1})
    assert r.status_code == 200
    hasher = engine.app.state.gateway.spec.deployments["spark"].kv_blocks
    assert set(cache_of(engine)._entries) == {external(d) for d in hasher.digests(prompt[:99])}


def test_gateway_cache_keeps_provider_steps() -> None:
    from fastmode.backends.engine import build
    spec = build(load_config().sim())
    assert all(d.kv_blocks is None for d in spec.deployments.values())
