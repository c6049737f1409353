"""The compose topology end to end: the official openai SDK -> gateway -> engine services.

Runs against a live topology (``make test-integration`` starts one as local processes, or
``docker compose up --exit-code-from integration-tests``); skipped without one. Every wait is
bounded. Tests that kill and restart an engine need the process topology (deselected in compose with -m 'not process_control').
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import httpx
import openai
import pytest

from .conftest import Topology, metric_sum, metrics, upstreams

pytestmark = pytest.mark.integration

USER = [{"role": "user", "content": "Explain continuous batching in two paragraphs."}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# (model, base path, gateway tier, the response's service_tier)
TIERS = [
    ("frontier", "/v1", "standard", "default"),
    ("frontier", "/fast/v1", "fast", "priority"),
    ("frontier-spark", "/v1", "spark", "default"),
]


def sdk(url: str, path: str = "/v1", **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + path, api_key="sk-test", max_retries=0, timeout=60, **kw)


def asdk(url: str, path: str = "/v1", **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + path, api_key="sk-test", max_retries=0, timeout=60,
                              **kw)


async def stream_one(client: openai.AsyncOpenAI, model: str = "frontier", tokens: int = 60,
                     on_chunk=None, **kw) -> dict:
    """One streamed completion; returns its upstream, text, usage, finish reason and chunk
    arrival times (content chunks only)."""
    raw = await client.chat.completions.with_raw_response.create(
        model=model, messages=USER, max_completion_tokens=tokens, stream=True,
        extra_body={"ignore_eos": True}, **kw,
    )
    out = {"upstream": raw.headers.get("x-fastmode-upstream"), "text": "", "usage": None,
           "finish": None, "times": [], "time_info": None, "error": None}
    stream = raw.parse()
    try:
        async for chunk in stream:
            if chunk.usage is not None:
                out["usage"] = chunk.usage
            extra = chunk.model_extra or {}
            if extra.get("time_info"):
                out["time_info"] = extra["time_info"]
            for c in chunk.choices:
                if c.delta.content:
                    out["times"].append(time.perf_counter())
                    out["text"] += c.delta.content
                if c.finish_reason:
                    out["finish"] = c.finish_reason
            if on_chunk is not None:
                on_chunk(out)
    except openai.APIError as exc:
        out["error"] = exc
    out["ended"] = time.monotonic()
    return out


# -- the topology is up and the SDK works across both hops -------------------------------------


def test_models_and_upstreams_in_rotation(gateway_url: str) -> None:
    ids = {m.id for m in sdk(gateway_url).models.list()}
    assert {"frontier", "frontier-spark"} <= ids
    pools = upstreams(gateway_url)
    assert set(pools) == {"standard", "fast", "spark"}
    assert len(pools["standard"]) == 2
    assert all(all(p.values()) for p in pools.values()), pools


@pytest.mark.parametrize("model,path,tier,label", TIERS)
def test_sdk_non_streaming_each_tier(gateway_url: str, model, path, tier, label) -> None:
    raw = sdk(gateway_url, path).chat.completions.with_raw_response.create(
        model=model, messages=USER, max_completion_tokens=40, seed=3
    )
    resp = raw.parse()
    assert raw.headers["x-fastmode-tier"] == tier
    assert raw.headers["x-fastmode-upstream"] in upstreams(gateway_url)[tier]
    assert resp.service_tier == label
    assert resp.choices[0].message.content
    assert resp.usage.completion_tokens == 40 or resp.choices[0].finish_reason == "stop"
    cost = float(raw.headers["x-fastmode-cost-usd"])
    assert cost > 0 and resp.usage.model_extra["cost_usd"] == pytest.approx(cost, abs=1e-8)


def test_priority_service_tier_routes_to_fast(gateway_url: str) -> None:
    raw = sdk(gateway_url).chat.completions.with_raw_response.create(
        model="frontier", messages=USER, max_completion_tokens=5, service_tier="priority"
    )
    assert raw.headers["x-fastmode-tier"] == "fast"
    assert raw.parse().service_tier == "priority"


def test_stream_passes_the_engine_reply_through_unchanged(gateway_url: str) -> None:
    client = sdk(gateway_url)
    whole = client.chat.completions.create(
        model="frontier", messages=USER, max_completion_tokens=50, seed=11)
    parts, usage, chunks = [], None, 0
    for chunk in client.chat.completions.create(
        model="frontier", messages=USER, max_completion_tokens=50, seed=11, stream=True,
        stream_options={"include_usage": True},
    ):
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
        for c in chunk.choices:
            parts.append(c.delta.content or "")
    assert "".join(parts) == whole.choices[0].message.content
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    # the same cost, but for the prefix the engine cached from the first request (its blocks)
    cached = [(u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0)
              for u in (whole.usage, usage)]
    if cached[0] == cached[1]:
        assert usage.model_extra["cost_usd"] == pytest.approx(whole.usage.model_extra["cost_usd"])
    else:
        assert cached[1] > cached[0]
        assert usage.model_extra["cost_usd"] < whole.usage.model_extra["cost_usd"]
    assert chunks >= usage.completion_tokens  # one chunk per token: nothing re-buffered


def test_stream_without_include_usage_has_no_usage_chunk(gateway_url: str) -> None:
    chunks = list(sdk(gateway_url).chat.completions.create(
        model="frontier-spark", messages=USER, max_completion_tokens=20, stream=True))
    assert chunks and all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)


def test_streamed_tool_call(gateway_url: str) -> None:
    calls: dict[int, dict] = {}
    finish = None
    for chunk in sdk(gateway_url).chat.completions.create(
        model="frontier", messages=[{"role": "user", "content": "Weather in Lyon?"}],
        tools=[WEATHER], tool_choice="required", stream=True, seed=5,
    ):
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                d = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function.name:
                    d["name"] = tc.function.name
                d["arguments"] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert calls[0]["name"] == "get_weather"
    assert "city" in json.loads(calls[0]["arguments"])


def test_errors_in_openai_format(gateway_url: str) -> None:
    client = sdk(gateway_url)
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="nope", messages=USER)
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as big:
        client.chat.completions.create(model="frontier", messages=USER,
                                       max_completion_tokens=10_000_000)
    assert big.value.code == "context_length_exceeded"


# -- streaming timing survives the extra hop ---------------------------------------------------

ITL_REL_TOL = 0.30  # median received gap within 30% of the modeled inter-token latency...
ITL_ABS_TOL = 0.0015  # ...or 1.5 ms, whichever is larger (loopback, 2 Python processes)


async def test_streaming_timing_preserved(gateway_url: str) -> None:
    """Modeled vs received inter-token times on the fast tier (~6 ms per token)."""
    out = await asyncio.wait_for(
        stream_one(asdk(gateway_url, "/fast/v1"), tokens=300,
                   stream_options={"include_usage": True}),
        timeout=60,
    )
    assert out["error"] is None and out["usage"] is not None and out["time_info"]
    n = out["usage"].completion_tokens
    modeled_itl = out["time_info"]["completion_time"] / (n - 1)
    times = out["times"]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    median = statistics.median(gaps)
    assert abs(median - modeled_itl) <= max(ITL_REL_TOL * modeled_itl, ITL_ABS_TOL), (
        f"median gap {median * 1000:.2f} ms vs modeled {modeled_itl * 1000:.2f} ms")
    span = times[-1] - times[0]
    modeled_span = out["time_info"]["completion_time"]
    print(f"\ntiming: median gap {median * 1e3:.2f} ms vs modeled ITL {modeled_itl * 1e3:.2f} ms;"
          f" stream {span:.3f} s vs modeled {modeled_span:.3f} s")
    assert abs(span - modeled_span) <= 0.15 * modeled_span + 0.05, (span, modeled_span)


# -- balancing, usage --------------------------------------------------------------------------


async def test_least_outstanding_spreads_concurrent_streams(gateway_url: str) -> None:
    client = asdk(gateway_url)
    outs = await asyncio.wait_for(
        asyncio.gather(*(stream_one(client, tokens=60) for _ in range(6))), timeout=60)
    assert all(o["error"] is None and o["finish"] == "length" for o in outs)
    by = {}
    for o in outs:
        by[o["upstream"]] = by.get(o["upstream"], 0) + 1
    assert sorted(by.values()) == [3, 3], by


def _usage_snapshot(gateway: str) -> dict[str, dict[str, float]]:
    """Per gateway tier: the gateway's billed counts and the sum of its upstreams' counts."""
    gw = metrics(gateway)
    out = {}
    for tier, ups in upstreams(gateway).items():
        engines = [metrics(u) for u in ups]
        row = {}
        for key, name in (("prompt", "fastmode_prompt_tokens_total"),
                          ("output", "fastmode_output_tokens_total"),
                          ("cost", "fastmode_cost_usd_total")):
            row["gw_" + key] = metric_sum(gw, name, tier=tier)
            row["eng_" + key] = sum(metric_sum(e, name) for e in engines)
        row["gw_requests"] = metric_sum(gw, "fastmode_requests_total", tier=tier, status="200")
        row["eng_requests"] = sum(metric_sum(e, "fastmode_requests_total", status="200")
                                  for e in engines)
        out[tier] = row
    return out


async def test_usage_at_gateway_matches_engines(gateway_url: str) -> None:
    before = _usage_snapshot(gateway_url)
    seen = {"standard": [0, 0], "fast": [0, 0], "spark": [0, 0]}  # prompt, output from the SDK
    jobs = []
    for model, path, tier, _ in TIERS:
        c = asdk(gateway_url, path)
        for i in range(2):
            jobs.append((tier, c.chat.completions.create(
                model=model, messages=USER, max_completion_tokens=30 + i, seed=i)))
        jobs.append((tier, stream_one(c, model=model, tokens=25,
                                      stream_options={"include_usage": True})))
        jobs.append((tier, stream_one(c, model=model, tokens=17)))  # usage stripped for client
    results = await asyncio.wait_for(asyncio.gather(*(j for _, j in jobs)), timeout=60)
    for (tier, _), r in zip(jobs, results, strict=True):
        usage = r.usage if hasattr(r, "usage") else r["usage"]
        if usage is None:  # a stream without include_usage: its tokens are ignore_eos=17
            seen[tier][1] += 17
            continue
        seen[tier][0] += usage.prompt_tokens
        seen[tier][1] += usage.completion_tokens
    after = _usage_snapshot(gateway_url)
    for tier in seen:
        d = {k: after[tier][k] - before[tier][k] for k in after[tier]}
        assert d["gw_requests"] == d["eng_requests"] == 4, (tier, d)
        assert d["gw_output"] == d["eng_output"] == seen[tier][1], (tier, d)
        assert d["gw_prompt"] == d["eng_prompt"], (tier, d)
        assert d["gw_prompt"] >= seen[tier][0] > 0, (tier, d)
        assert d["gw_cost"] == pytest.approx(d["eng_cost"], rel=1e-9), (tier, d)


# -- failures: an engine killed mid-run, then restarted ----------------------------------------


async def _wait_rotation(gateway: str, url: str, up: bool, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if upstreams(gateway)["standard"].get(url) is up:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{url} not {'in' if up else 'out of'} rotation after {timeout} s")


@pytest.mark.process_control
async def test_engine_killed_mid_run(gateway_url: str, topology: Topology) -> None:
    client = asdk(gateway_url)
    victim_url, survivor_url = sorted(upstreams(gateway_url)["standard"])
    victim = topology.name_of(victim_url)
    progressed = asyncio.Event()
    started: set[int] = set()

    def watch(i):
        def on_chunk(out):
            if len(out["times"]) >= 5:
                started.add(i)
                if len(started) == 6:
                    progressed.set()
        return on_chunk

    # 6 streams (3 per replica) of ~400 tokens at ~65 tok/s, and 2 non-streamed requests
    streams = [asyncio.ensure_future(stream_one(client, tokens=400, on_chunk=watch(i),
                                                stream_options={"include_usage": True}))
               for i in range(6)]
    whole = [asyncio.ensure_future(client.with_options(timeout=60).chat.completions
                                   .with_raw_response.create(
                                       model="frontier", messages=USER,
                                       max_completion_tokens=150))
             for _ in range(2)]
    await asyncio.wait_for(progressed.wait(), timeout=20)
    t_kill = time.monotonic()
    topology.kill(victim)
    outs = await asyncio.wait_for(asyncio.gather(*streams), timeout=30)  # no hang
    elapsed = time.monotonic() - t_kill
    on_victim = [o for o in outs if o["upstream"] == victim_url]
    on_survivor = [o for o in outs if o["upstream"] == survivor_url]
    assert len(on_victim) == 3 and len(on_survivor) == 3
    for o in on_victim:  # failed cleanly and at once: an OpenAI error after partial text
        assert isinstance(o["error"], openai.APIError), o
        assert o["finish"] is None and 5 <= len(o["times"]) < 400
        assert o["ended"] - t_kill < 2.0, o["ended"] - t_kill
    for o in on_survivor:
        assert o["error"] is None and o["finish"] == "length"
        assert o["usage"].completion_tokens == 400
    # the streams on the dead engine ended at once, not after a timeout
    assert elapsed < 15, elapsed
    cut = max(o["ended"] for o in on_victim) - t_kill
    print(f"\nkill: the dead engine's streams failed {cut * 1e3:.0f} ms after the kill; "
          f"the survivor's completed {elapsed:.2f} s after it")
    # non-streamed requests in flight had sent nothing: retried on the survivor, they succeed
    for raw in await asyncio.wait_for(asyncio.gather(*whole), timeout=30):
        assert raw.parse().usage.completion_tokens > 0
        assert raw.headers["x-fastmode-upstream"] == survivor_url
    await _wait_rotation(gateway_url, victim_url, up=False)
    # new requests go to the survivor, without errors
    news = await asyncio.wait_for(
        asyncio.gather(*(stream_one(client, tokens=10) for _ in range(4))), timeout=30)
    assert all(o["error"] is None and o["upstream"] == survivor_url for o in news)
    gw = metrics(gateway_url)
    assert metric_sum(gw, "fastmode_upstream_attempts_total", upstream=victim_url,
                      outcome="failed") >= 3


@pytest.mark.process_control
async def test_engine_restarted_rejoins_rotation(gateway_url: str, topology: Topology) -> None:
    urls = sorted(upstreams(gateway_url)["standard"])
    victim_url = urls[0]
    victim = topology.name_of(victim_url)
    if topology.alive(victim):  # run alone: make the failure first
        topology.kill(victim)
        await _wait_rotation(gateway_url, victim_url, up=False)
    t0 = time.monotonic()
    topology.restart(victim)
    await _wait_rotation(gateway_url, victim_url, up=True)
    rejoin = time.monotonic() - t0
    print(f"\nrestart: healthy and back in rotation {rejoin:.2f} s after the restart began")
    client = asdk(gateway_url)
    outs = await asyncio.wait_for(
        asyncio.gather(*(stream_one(client, tokens=40) for _ in range(4))), timeout=30)
    assert all(o["error"] is None for o in outs)
    assert {o["upstream"] for o in outs} == set(urls), outs
    assert rejoin < 35


def test_gateway_health_and_readiness(gateway_url: str) -> None:
    assert httpx.get(gateway_url + "/healthz", timeout=5).json()["status"] == "ok"
    ready = httpx.get(gateway_url + "/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json()["status"] == "ok", ready.text
    assert all(t["upstreams_in_rotation"] >= 1 for t in ready.json()["tiers"].values())
