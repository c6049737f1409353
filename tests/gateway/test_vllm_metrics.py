"""vLLM-compatible metrics of a fastmode engine, read with prometheus_client's own parser.

The engine's app runs in process (httpx.ASGITransport, lifespan on); requests go through it and
the exposition must carry vLLM's names, types and labels, with values that add up to what the
requests did (tokens, successes by finish reason, one TTFT per request, one ITL sample per
decoded token, e2e = queue + prefill + decode)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastmode.gateway.app import create_app
from fastmode.gateway.config import load_config
from fastmode.gateway.engine_config import engine_config

USER = [{"role": "user", "content": "Explain continuous batching."}]
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
            "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions")
HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
              "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds")


@pytest.fixture
async def engine() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(engine_config(load_config(), "spark", replicas=2))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e")
    try:
        yield client
    finally:
        await client.aclose()
        await ctx.__aexit__(None, None, None)


async def scrape(client: httpx.AsyncClient) -> dict:
    text = (await client.get("/metrics")).text
    return {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("vllm:")}


def value(fams: dict, name: str, suffix: str = "", **labels: str) -> float:
    return sum(s.value for s in fams[name].samples if s.name == name + suffix
               and all(s.labels.get(k) == v for k, v in labels.items()))


async def test_names_types_and_labels(engine) -> None:
    fams = await scrape(engine)
    for name in GAUGES:
        assert fams[name].type == "gauge", name
    for name in COUNTERS:
        assert fams[name].type == "counter", name
    for name in HISTOGRAMS:
        assert fams[name].type == "histogram", name
    engines = {s.labels["engine"] for s in fams["vllm:num_requests_waiting"].samples}
    assert engines == {"0", "1"}  # one vLLM engine per replica
    for s in fams["vllm:kv_cache_usage_perc"].samples:
        assert s.labels["model_name"] == "frontier-spark" and 0 < s.value < 1  # others' KV
    info = fams["vllm:cache_config_info"].samples[0]
    assert info.labels["block_size"] == "16" and int(info.labels["num_gpu_blocks"]) > 0


async def test_values_add_up_to_the_requests(engine) -> None:
    usages = []
    for body in ({"max_tokens": 40, "seed": 1}, {"max_tokens": 12, "ignore_eos": True},
                 {"max_tokens": 25, "seed": 2}):
        r = await engine.post("/v1/chat/completions",
                              json={"model": "frontier-spark", "messages": USER, **body})
        assert r.status_code == 200
        usages.append((r.json()["usage"], r.json()["choices"][0]["finish_reason"]))
    fams = await scrape(engine)
    out = sum(u["completion_tokens"] for u, _ in usages)
    assert value(fams, "vllm:generation_tokens", "_total") == out
    assert value(fams, "vllm:prompt_tokens", "_total") == sum(u["prompt_tokens"]
                                                               for u, _ in usages)
    lengths = sum(1 for _, reason in usages if reason == "length")
    assert lengths >= 1
    assert value(fams, "vllm:request_success", "_total", finished_reason="length") == lengths
    assert value(fams, "vllm:request_success", "_total") == 3
    assert value(fams, "vllm:time_to_first_token_seconds", "_count") == 3
    assert value(fams, "vllm:inter_token_latency_seconds", "_count") == out - 3
    e2e = value(fams, "vllm:e2e_request_latency_seconds", "_sum")
    parts = sum(value(fams, f"vllm:request_{p}_time_seconds", "_sum")
                for p in ("queue", "prefill", "decode"))
    assert e2e > 0 and parts == pytest.approx(e2e, rel=1e-9)
    assert value(fams, "vllm:num_requests_waiting") == 0
    buckets = [s for s in fams["vllm:time_to_first_token_seconds"].samples
               if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"]
    assert sum(b.value for b in buckets) == 3


async def test_running_gauge_counts_an_admitted_request(engine) -> None:
    from fastmode.backends.mockmodel import GenerationRequest
    from fastmode.gateway.values.request import TurnRequest

    before = value(await scrape(engine), "vllm:num_requests_running")
    gateway = engine._transport.app.state.gateway  # type: ignore[attr-defined]
    gen = GenerationRequest(messages=USER, ignore_eos=True)
    job = await gateway.admit(TurnRequest("frontier-spark", "standard", gen, 20, 3000, True))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    running = before
    while loop.time() < deadline and running != before + 1:
        await asyncio.sleep(0.005)
        running = value(await scrape(engine), "vllm:num_requests_running")
    assert running == before + 1
    gateway.settle(job, 499)


class _Only:
    """A registry of one collector, for ``generate_latest``."""

    def __init__(self, collector: object) -> None:
        self.collector = collector

    def collect(self):  # type: ignore[no-untyped-def]
        return self.collector.collect()  # type: ignore[attr-defined]


@pytest.mark.parametrize("deployments", [1, 2])
async def test_the_fast_text_is_prometheus_clients_byte_for_byte(deployments: int) -> None:
    """``render`` writes what ``generate_latest`` writes for ``collect``'s families: after
    traffic (counts past a million, so Go's exponent form too), with one deployment and with
    several (the ``deployment`` label), a model name that needs escaping, and after a
    re-attach (the cached label text made again)."""
    from prometheus_client import generate_latest

    from fastmode.gateway.observe.vllm_metrics import VllmMetrics

    app = create_app(engine_config(load_config(), "spark", replicas=2))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    try:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e")
        for _ in range(3):
            r = await client.post("/v1/chat/completions", json={
                "model": "frontier-spark", "messages": USER, "max_tokens": 20})
            assert r.status_code == 200
        await client.aclose()
        gateway = app.state.gateway
        vm = next(r for r in gateway.metrics.rendered if isinstance(r, VllmMetrics))
        assert vm.render() == generate_latest(_Only(vm))
        dep, engine = vm.engines[0]
        engine.prompt = 12_345_678  # Go's exponent form: 1.2345678e+07
        engine.e2e.counts[0] += 2_000_000
        engine.e2e.sum += 0.1
        if deployments == 2:  # a second deployment: every series gains its label
            replicas = [e.replica for _, e in vm.engines]
            vm.attach('odd "name"\\', 'm\n"x"', replicas[:1])
        assert vm.render() == generate_latest(_Only(vm))
        assert b"1.2345678e+07" in vm.render()
    finally:
        await ctx.__aexit__(None, None, None)


async def test_the_scrape_carries_the_registry_and_the_rendered_families(engine) -> None:
    text = (await engine.get("/metrics")).text
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "vllm:e2e_request_latency_seconds" in names  # rendered
    assert "fastmode_requests" in names  # the registry's
    assert text.count("# TYPE vllm:e2e_request_latency_seconds histogram") == 1
