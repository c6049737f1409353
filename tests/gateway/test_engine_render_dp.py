"""vLLM's render routes and data-parallel ranks on an engine (virtual clock).

Render answers the token ids the engine itself would hash into blocks for the same request, in
vLLM's ``GenerateRequest`` shape; ``--data-parallel-size N`` runs N ranks, each its own
scheduler with its own ``engine`` label, a request going to the least loaded
(``4 x waiting + running``) unless ``X-data-parallel-rank`` names one."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from virtual_app import app_client, run_app_virtual

from fastmode.backends.block_hash import BlockHasher
from fastmode.cli import build_parser
from fastmode.cli.engine import apply_flags
from fastmode.gateway.config import Config, load_config
from fastmode.gateway.engine_config import engine_config

DEPLOYMENT = "oss"
USER = [{"role": "user", "content": "Which rank serves this request, and why that one? " * 6}]
RENDER_KEYS = {"request_id", "token_ids", "features", "sampling_params", "model", "stream",
               "stream_options", "cache_salt", "priority", "kv_transfer_params"}


def engine(*flags: str) -> Config:
    args, extra = build_parser().parse_known_args(["engine", "--deployment", DEPLOYMENT,
                                                   *flags])
    args.ignored = extra
    return engine_config(apply_flags(load_config(), args), DEPLOYMENT, args.replicas)


def test_chat_render_is_the_prompt_the_engine_hashes() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine("-dp", "1")) as client:
            model = (await client.get("/v1/models")).json()["data"][0]["id"]
            r = await client.post("/v1/chat/completions/render", json={
                "model": model, "messages": USER, "max_tokens": 7, "seed": 3})
            assert r.status_code == 200
            body = r.json()
            assert set(body) == RENDER_KEYS and body["model"] == model
            assert body["features"] is None
            assert body["sampling_params"]["max_tokens"] == 7
            assert body["sampling_params"]["seed"] == 3
            tok = (await client.post("/tokenize", json={"model": model, "messages": USER})).json()
            assert body["token_ids"] == tok["tokens"]
            done = await client.post("/v1/chat/completions", json={
                "model": model, "messages": USER, "max_tokens": 7})
            assert done.json()["usage"]["prompt_tokens"] == len(body["token_ids"])
            # the blocks a router hashes from the rendered ids are the ones the engine cached
            spec = client.app.state.gateway.spec.deployments[DEPLOYMENT]
            hasher = spec.kv_blocks
            assert isinstance(hasher, BlockHasher)
            key = hasher.key(body["token_ids"])
            assert key is not None  # the prompt spans several blocks
            sched = client.app.state.gateway.deployments[DEPLOYMENT].replicas[0].scheduler
            assert sched.cached_prefix(key, len(body["token_ids"]), loop.time()) >= 16

    run_app_virtual(main)


def test_completions_render_answers_one_entry_per_prompt() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine("-dp", "1")) as client:
            model = (await client.get("/v1/models")).json()["data"][0]["id"]
            r = await client.post("/v1/completions/render", json={
                "model": model, "prompt": [[5, 6, 7], [8, 9]], "max_tokens": 3})
            assert r.status_code == 200
            entries = r.json()
            assert [e["token_ids"] for e in entries] == [[5, 6, 7], [8, 9]]
            assert all(set(e) == RENDER_KEYS for e in entries)
            text = (await client.post("/v1/completions/render", json={
                "model": model, "prompt": "one prompt"})).json()
            tok = (await client.post("/tokenize", json={"prompt": "one prompt"})).json()
            assert len(text) == 1 and text[0]["token_ids"] == tok["tokens"]
            missing = await client.post("/v1/completions/render", json={
                "model": "no-such-model", "prompt": "x"})
            assert missing.status_code == 404
            bad = await client.post("/v1/chat/completions/render", json={"model": model})
            assert bad.status_code == 400

    run_app_virtual(main)


def prompt_tokens_by_engine(metrics: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^vllm:prompt_tokens_total\{engine="(\d+)",model_name="[^"]*"\} (\S+)$', metrics, re.M)}


def test_requests_spread_over_ranks_by_load_unless_the_header_names_one() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine("--data-parallel-size", "2")) as client:
            model = (await client.get("/v1/models")).json()["data"][0]["id"]
            ranks = client.app.state.gateway.deployments[DEPLOYMENT].replicas
            assert len(ranks) == 2

            async def ask(headers: dict[str, str] | None = None) -> int:
                r = await client.post("/v1/completions", headers=headers, json={
                    "model": model, "prompt": "spread me " * 40, "max_tokens": 30,
                    "ignore_eos": True})
                return r.status_code

            # two at once: the second goes to the idle rank (its score 0 against 1)
            assert await asyncio.gather(ask(), ask()) == [200, 200]
            first = prompt_tokens_by_engine((await client.get("/metrics")).text)
            assert set(first) == {"0", "1"} and first["0"] > 0 and first["1"] > 0
            # pinned: both to rank 1
            assert await asyncio.gather(*(ask({"X-data-parallel-rank": "1"})
                                          for _ in range(2))) == [200, 200]
            second = prompt_tokens_by_engine((await client.get("/metrics")).text)
            assert second["0"] == first["0"] and second["1"] > first["1"]
            for bad in ("2", "-1", "one"):
                r = await client.post("/v1/completions", headers={"X-data-parallel-rank": bad},
                                      json={"model": model, "prompt": "x"})
                assert r.status_code == 400
                assert "X-data-parallel-rank" in r.json()["error"]["message"]

    run_app_virtual(main)
