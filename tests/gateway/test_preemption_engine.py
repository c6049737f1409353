"""Preemption on an engine, as a client and vLLM's tooling see it (virtual clock).

``fastmode engine --gpu-memory-utilization 0.84`` leaves its users less KV than six long
replies need at once: the engine preempts the newest request when its blocks run out and
recomputes it later (fastmode/backends/kv_paging.py). A client streaming it gets every token
once, the same text as the request gets alone on an idle engine (the pause itself is timed in
tests/backends/test_preemption.py: this transport hands a response over whole);
``/metrics`` counts the preemptions in ``vllm:num_preemptions_total``, a counter with vLLM's
labels."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from virtual_app import app_client, run_app_virtual

from fastmode.cli import build_parser
from fastmode.cli.engine import apply_flags
from fastmode.gateway.config import load_config
from fastmode.gateway.engine_config import engine_config

PROMPT = "Summarise the design of a paged KV cache. " * 150  # 1,501 tokens
OUTPUT, REQUESTS = 1000, 6


def engine(*flags: str) -> Any:
    """The config ``fastmode engine --deployment oss -dp 1 FLAGS`` serves."""
    args, extra = build_parser().parse_known_args(["engine", "--deployment", "oss", "-dp", "1",
                                                   *flags])
    args.ignored = extra
    return engine_config(apply_flags(load_config(), args), "oss", args.replicas)


async def stream(client: httpx.AsyncClient, model: str, seed: int
                 ) -> tuple[list[str], dict[str, Any]]:
    """One streamed completion: the text of each event, and its usage."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": OUTPUT, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}, "seed": seed}
    chunks: list[str] = []
    usage: dict[str, Any] = {}
    async with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            usage = event.get("usage") or usage
            if event["choices"] and event["choices"][0]["text"]:
                chunks.append(event["choices"][0]["text"])
    return chunks, usage


async def model_id(client: httpx.AsyncClient) -> str:
    return str((await client.get("/v1/models")).json()["data"][0]["id"])


def test_preempted_streams_finish_with_their_tokens_and_the_counter_says_so() -> None:
    async def main(loop: Any) -> tuple[list[Any], float, dict[int, str]]:
        async with app_client(engine("--gpu-memory-utilization", "0.84")) as client:
            model = await model_id(client)
            runs = await asyncio.gather(*(stream(client, model, i) for i in range(REQUESTS)))
            text = (await client.get("/metrics")).text
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        itl = fams["vllm:inter_token_latency_seconds"]
        (count,) = [s.value for s in itl.samples if s.name.endswith("_count")]
        assert count == REQUESTS * (OUTPUT - 1)  # one gap per token after the first, pauses too
        fam = fams["vllm:num_preemptions"]
        assert fam.type == "counter"
        (sample,) = [s for s in fam.samples if s.name == "vllm:num_preemptions_total"]
        assert set(sample.labels) == {"model_name", "engine"} and sample.labels["engine"] == "0"
        async with app_client(engine()) as idle:  # the same requests, one at a time
            alone = {}
            for i in range(REQUESTS):
                chunks, _ = await stream(idle, await model_id(idle), i)
                alone[i] = "".join(chunks)
        return runs, sample.value, alone

    runs, preemptions, alone = run_app_virtual(main)
    assert preemptions > 0
    for seed, (chunks, usage) in enumerate(runs):
        assert usage["completion_tokens"] == OUTPUT
        assert len(chunks) == OUTPUT  # one token per event: none lost, none twice
        assert "".join(chunks) == alone[seed]  # the same reply, in order
