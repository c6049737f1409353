"""Remote tiers (fastmode/gateway/remote/) against scripted fake upstreams, and `fastmode engine`'s config.

The fake upstreams are small OpenAI-compatible servers (vLLM-shaped chunks, no ``time_info``)
whose behaviour each test sets: answer (text or a tool call), fail with a status, die
mid-stream, report unhealthy. The gateway and the fakes run as real uvicorn servers on loopback
in the test's event loop. Every protocol goes through them: Chat Completions, Responses (SSE,
non-streamed, websocket, previous_response_id) and Anthropic Messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import tomllib

import httpx
import openai
import orjson
import pytest
import uvicorn
from conftest import bound_socket
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, ConfigError, default_config_text, load_config
from fastmode.gateway.engine_config import engine_config
from fastmode.gateway.remote import ChunkReader, LiveReply, UpstreamPool, upstream_error

USER = [{"role": "user", "content": "hello"}]


class Fake:
    """One scripted upstream: ``mode`` is ok | 503 | 400 | die; ``healthy`` drives /healthz."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.healthy = True
        self.bodies: list[dict] = []
        self.cancelled = 0
        self.tokens = 5
        self.gap = 0.01
        self.tool = False  # answer with a get_weather tool call instead of text
        self.app = Starlette(routes=[
            Route("/healthz", self.health),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ])

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": self.healthy}, 200 if self.healthy else 503)

    def chunk(self, delta: dict | None, finish: str | None = None, **extra) -> bytes:
        obj = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
               "model": "frontier", "service_tier": "auto",
               "choices": [] if delta is None else
               [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.bodies.append(body)
        if self.mode == "503":
            return JSONResponse({"error": {"message": "busy", "type": "service_unavailable_error",
                                           "param": None, "code": "server_is_overloaded"}},
                                503, headers={"retry-after": "2"})
        if self.mode == "400":  # vLLM's shape
            return JSONResponse({"object": "error", "message": "bad temperature",
                                 "type": "BadRequestError", "param": "temperature",
                                 "code": 400}, 400)
        usage = {"prompt_tokens": 10, "completion_tokens": self.tokens, "total_tokens":
                 10 + self.tokens, "cost_usd": 999.0}
        call = {"id": "call_fake1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}
        if not body.get("stream"):
            message = ({"role": "assistant", "content": None, "tool_calls": [call]} if self.tool
                       else {"role": "assistant", "content": "hi " * self.tokens})
            return JSONResponse({
                "id": "chatcmpl-fake", "object": "chat.completion", "created": 1,
                "model": body["model"], "service_tier": "auto",
                "choices": [{"index": 0, "finish_reason": "tool_calls" if self.tool else "stop",
                             "message": message}],
                "usage": usage,
            })
        include = (body.get("stream_options") or {}).get("include_usage")
        mode, n, gap, tool = self.mode, self.tokens, self.gap, self.tool

        async def gen():
            try:
                yield self.chunk({"role": "assistant", "content": ""}, usage=None)
                if tool:
                    yield self.chunk({"tool_calls": [{"index": 0, "id": call["id"],
                                      "type": "function", "function": {
                                          "name": "get_weather", "arguments": ""}}]})
                    for frag in ('{"city": ', '"Lyon"}'):
                        yield self.chunk({"tool_calls": [{"index": 0, "function": {
                            "arguments": frag}}]})
                for i in range(0 if tool else n):
                    await asyncio.sleep(gap)
                    if mode == "die" and i == 2:
                        raise RuntimeError("engine crashed")
                    yield self.chunk({"content": f"t{i} "}, usage=None)
                yield self.chunk({}, "tool_calls" if tool else "stop", usage=None)
                if include:
                    yield self.chunk(None, usage=usage)
                yield b"data: [DONE]\n\n"
            except asyncio.CancelledError:
                self.cancelled += 1
                raise

        return StreamingResponse(gen(), media_type="text/event-stream")


@contextlib.asynccontextmanager
async def serve(app, ws: str = "none"):
    """``app`` on a loopback port the OS picked (bound here, handed to uvicorn: no race for a
    port between parallel test processes); yields its base URL."""
    with bound_socket() as sock:
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="error", lifespan="on", ws=ws))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.01)
        assert server.started
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)


def remote_config(fast: list[str], spark: list[str], **remote) -> Config:
    """Checks every 0.1 s; a check that takes 5 s fails (the fakes answer at once, refused
    connections fail at once: a short timeout only took a live fake out of rotation when a
    loaded CI machine was slow to run it, which broke tests that expect both in rotation)."""
    raw = tomllib.loads(default_config_text())
    raw["remote"] = {"health_interval_s": 0.1, "health_timeout_s": 5.0,
                     "tiers": {"fast": {"upstreams": fast}, "spark": {"upstreams": spark}},
                     **remote}
    return Config.model_validate(raw)


@pytest.fixture
async def topo():
    """Two fakes behind the fast tier, a dead address behind spark; standard in-process."""
    a, b = Fake(), Fake()
    with bound_socket() as nobody:  # bound, never listening: connections to it are refused
        dead = f"http://127.0.0.1:{nobody.getsockname()[1]}"
        async with serve(a.app) as ua, serve(b.app) as ub:
            app = create_app(remote_config([ua, ub], [dead]))
            async with serve(app, ws="websockets-sansio") as ug:
                yield {"a": a, "b": b, "ua": ua, "ub": ub, "gw": ug, "dead": dead, "app": app}
                while _CLIENTS:
                    await _CLIENTS.pop().close()


_CLIENTS: list[openai.AsyncOpenAI] = []


def aclient(url: str, path: str = "/fast/v1") -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(base_url=url + path, api_key="x", max_retries=0, timeout=10)
    _CLIENTS.append(client)
    return client


async def gw_metric(url: str, name: str, **labels: str) -> float:
    async with httpx.AsyncClient() as c:
        text = (await c.get(url + "/metrics")).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- end to end through the gateway -----------------------------------------------------------


async def test_non_streaming_billed_at_gateway_prices(topo) -> None:
    raw = await aclient(topo["gw"]).chat.completions.with_raw_response.create(
        model="frontier", messages=USER, service_tier="priority")
    resp = raw.parse()
    tier = topo["app"].state.gateway.spec.tiers["fast"]
    expected = tier.prices.cost(10, 0, 5)
    assert resp.usage.model_extra["cost_usd"] == pytest.approx(expected)  # not the fake's 999
    assert float(raw.headers["x-fastmode-cost-usd"]) == pytest.approx(expected, abs=1e-8)
    assert resp.service_tier == "priority"  # the gateway's tier, not the upstream's "auto"
    assert raw.headers["x-fastmode-tier"] == "fast"
    body = (topo["a"].bodies + topo["b"].bodies)[0]
    assert "service_tier" not in body and body["model"] == "frontier"
    assert await gw_metric(topo["gw"], "fastmode_output_tokens_total", tier="fast") == 5


async def test_stream_usage_forced_upstream_and_stripped(topo) -> None:
    chunks = [c async for c in await aclient(topo["gw"]).chat.completions.create(
        model="frontier", messages=USER, stream=True)]
    body = (topo["a"].bodies + topo["b"].bodies)[0]
    assert body["stream_options"] == {"include_usage": True}
    assert all(c.usage is None and c.choices for c in chunks)
    assert {c.service_tier for c in chunks} == {"priority"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "t0 t1 t2 t3 t4 "
    assert await gw_metric(topo["gw"], "fastmode_output_tokens_total", tier="fast") == 5
    assert await gw_metric(topo["gw"], "fastmode_requests_total", tier="fast") == 1


async def test_stream_usage_chunk_carries_gateway_cost(topo) -> None:
    usage = None
    async for c in await aclient(topo["gw"]).chat.completions.create(
            model="frontier", messages=USER, stream=True,
            stream_options={"include_usage": True}):
        if c.usage is not None:
            usage = c.usage
    tier = topo["app"].state.gateway.spec.tiers["fast"]
    assert usage.completion_tokens == 5
    assert usage.model_extra["cost_usd"] == pytest.approx(tier.prices.cost(10, 0, 5))


async def test_retry_on_503_while_nothing_streamed(topo) -> None:
    topo["a"].mode = "503"
    client = aclient(topo["gw"])
    for _ in range(4):
        raw = await client.chat.completions.with_raw_response.create(
            model="frontier", messages=USER, stream=True)
        assert raw.headers["x-fastmode-upstream"] == topo["ub"]
        [c async for c in raw.parse()]
    assert await gw_metric(topo["gw"], "fastmode_upstream_attempts_total",
                           upstream=topo["ua"], outcome="retried") >= 1


async def test_fast_pool_overloaded_answers_429_like_in_process(topo) -> None:
    topo["a"].mode = topo["b"].mode = "503"
    with pytest.raises(openai.RateLimitError) as exc:
        await aclient(topo["gw"]).chat.completions.create(model="frontier", messages=USER)
    assert exc.value.code == "rate_limit_exceeded"
    assert exc.value.response.headers["retry-after"]


async def test_upstream_client_error_is_mapped_not_retried(topo) -> None:
    topo["a"].mode = topo["b"].mode = "400"
    with pytest.raises(openai.BadRequestError) as exc:
        await aclient(topo["gw"]).chat.completions.create(model="frontier", messages=USER)
    assert exc.value.message == "bad temperature" or "bad temperature" in str(exc.value)
    assert exc.value.param == "temperature"
    assert len(topo["a"].bodies) + len(topo["b"].bodies) == 1


async def test_all_upstreams_down_is_503_with_retry_after(topo) -> None:
    client = aclient(topo["gw"], "/v1")
    with pytest.raises(openai.InternalServerError) as exc:
        await client.chat.completions.create(model="frontier-spark", messages=USER)
    assert exc.value.status_code == 503 and exc.value.code == "upstream_unavailable"
    assert exc.value.response.headers["retry-after"]
    assert await gw_metric(topo["gw"], "fastmode_upstream_up", upstream=topo["dead"]) == 0


async def test_death_mid_stream_ends_with_an_error_event(topo) -> None:
    topo["a"].mode = topo["b"].mode = "die"
    got = []
    with pytest.raises(openai.APIError, match="middle of the response"):
        async for c in await aclient(topo["gw"]).chat.completions.create(
                model="frontier", messages=USER, stream=True):
            got.append(c)
    assert len(got) == 3  # role chunk + 2 tokens, then the error
    assert await gw_metric(topo["gw"], "fastmode_requests_total", tier="fast") == 1
    assert await gw_metric(topo["gw"], "fastmode_requests_total", tier="fast",
                           status="200") == 0
    assert await gw_metric(topo["gw"], "fastmode_output_tokens_total", tier="fast") == 2
    assert await gw_metric(topo["gw"], "fastmode_upstream_attempts_total",
                           outcome="failed") == 1
    assert await gw_metric(topo["gw"], "fastmode_upstream_outstanding", tier="fast") == 0


async def test_health_checks_take_upstreams_out_and_back(topo) -> None:
    topo["a"].healthy = False
    for _ in range(50):
        if await gw_metric(topo["gw"], "fastmode_upstream_up", upstream=topo["ua"]) == 0:
            break
        await asyncio.sleep(0.05)
    assert await gw_metric(topo["gw"], "fastmode_upstream_up", upstream=topo["ua"]) == 0
    client = aclient(topo["gw"])
    for _ in range(3):
        raw = await client.chat.completions.with_raw_response.create(
            model="frontier", messages=USER)
        assert raw.headers["x-fastmode-upstream"] == topo["ub"]
    topo["a"].healthy = True
    for _ in range(50):
        if await gw_metric(topo["gw"], "fastmode_upstream_up", upstream=topo["ua"]) == 1:
            break
        await asyncio.sleep(0.05)
    assert await gw_metric(topo["gw"], "fastmode_upstream_up", upstream=topo["ua"]) == 1


async def test_client_gone_mid_stream_closes_the_upstream(topo) -> None:
    topo["a"].tokens = topo["b"].tokens = 200
    async with httpx.AsyncClient(timeout=5) as c:
        async with c.stream("POST", topo["gw"] + "/fast/v1/chat/completions", json={
                "model": "frontier", "messages": USER, "stream": True}) as r:
            async for _ in r.aiter_bytes():
                break
    for _ in range(100):
        if topo["a"].cancelled + topo["b"].cancelled == 1 and await gw_metric(
                topo["gw"], "fastmode_upstream_outstanding", tier="fast") == 0:
            break
        await asyncio.sleep(0.05)
    assert topo["a"].cancelled + topo["b"].cancelled == 1
    assert await gw_metric(topo["gw"], "fastmode_upstream_outstanding", tier="fast") == 0
    assert await gw_metric(topo["gw"], "fastmode_requests_total", tier="fast") == 1


async def test_local_tiers_stay_in_process(topo) -> None:
    client = aclient(topo["gw"], "/v1")
    raw = await client.chat.completions.with_raw_response.create(
        model="frontier", messages=USER, max_completion_tokens=3)
    assert "x-fastmode-upstream" not in raw.headers  # standard stays in-process
    assert raw.headers["x-fastmode-tier"] == "standard"
    assert not topo["a"].bodies and not topo["b"].bodies


# -- pieces -----------------------------------------------------------------------------------


def _stream(tool: bool = False) -> bytes:
    f = Fake()
    delta = ({"tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                              "function": {"name": "f", "arguments": '{"a":'}}]} if tool
             else {"content": "a"})
    more = ({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]} if tool
            else {"content": "b"})
    return b"".join([
        f.chunk({"role": "assistant", "content": ""}, usage=None),
        f.chunk(delta, usage=None),
        f.chunk(more, usage=None),
        f.chunk({}, "tool_calls" if tool else "stop", usage=None,
                time_info={"completion_time": 0.5}),
        f.chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
                             "prompt_tokens_details": {"cached_tokens": 4}}),
        b"data: [DONE]\n\n",
    ])


@pytest.mark.parametrize("step", [1, 7, 64, 10_000])
@pytest.mark.parametrize("tool", [False, True])
def test_chunk_reader_whatever_the_chunking(step: int, tool: bool) -> None:
    data = _stream(tool)
    reply = LiveReply()
    reader = ChunkReader(reply)
    added = sum(reader.feed(data[i:i + step]) for i in range(0, len(data), step))
    assert reader.done and not reader.buf and added == 2 == len(reply.pieces)
    assert reader.usage is not None and reader.usage["prompt_tokens"] == 10
    assert reader.time_info == {"completion_time": 0.5}
    assert reply.output_tokens == 2
    if tool:
        assert reply.text == "" and reply.finish_reason == "tool_calls"
        assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("call_x", "f",
                                                                            '{"a": 1}')]
        assert [p.tool for p in reply.pieces] == [0, 0]
    else:
        assert reply.text == "ab" and reply.finish_reason == "stop" and not reply.tool_calls


def test_chunk_reader_raises_on_an_upstream_error_event() -> None:
    from fastmode.gateway.remote.translate import UpstreamFailed

    reader = ChunkReader(LiveReply())
    with pytest.raises(UpstreamFailed, match="boom"):
        reader.feed(b'data: {"error": {"message": "boom", "code": "x"}}\n\n')


def test_pick_least_outstanding_healthy() -> None:
    cfg = remote_config(["http://a", "http://b", "http://c"], ["http://d"]).remote.tiers["fast"]
    pool = UpstreamPool("fast", cfg)
    a, b, c = pool.upstreams
    a.outstanding, b.outstanding, c.outstanding = 2, 0, 1
    assert pool.pick(set()) is b
    assert pool.pick({b}) is c
    b.healthy = False
    assert pool.pick(set()) is c
    c.outstanding = a.outstanding = 0
    assert {pool.pick(set()).url for _ in range(4)} == {"http://a", "http://c"}  # ties rotate
    a.healthy = c.healthy = False
    assert pool.pick(set()) is not None  # all down: still try them
    assert pool.pick({a, b, c}) is None


def test_upstream_error_shapes() -> None:
    e = upstream_error(400, b'{"object":"error","message":"m","type":"BadRequestError",'
                       b'"param":null,"code":400}')
    assert (e.status, e.message, e.type, e.code) == (400, "m", "invalid_request_error", None)
    e = upstream_error(429, b'{"error":{"message":"slow","type":"requests",'
                       b'"param":null,"code":"rate_limit_exceeded"}}',
                       httpx.Headers({"retry-after": "3"}))
    assert (e.status, e.type, e.code, e.headers) == (429, "requests", "rate_limit_exceeded",
                                                     {"retry-after": "3"})
    e = upstream_error(500, b"Internal Server Error")
    assert e.status == 500 and e.type == "server_error" and "Internal Server Error" in e.message
    assert upstream_error(422, b'{"detail":"nope"}').message == "nope"


# -- configuration ------------------------------------------------------------------------------


def test_remote_config_validation(monkeypatch, tmp_path) -> None:
    base = default_config_text()
    p = tmp_path / "c.toml"
    p.write_text(base + '\n[remote.tiers.nope]\nupstreams = ["http://x"]\n')
    with pytest.raises(ConfigError, match="remote.tiers.nope"):
        load_config(p)
    p.write_text(base + '\n[remote.tiers.fast]\nupstreams = ["ftp://x"]\n')
    with pytest.raises(ConfigError, match="http"):
        load_config(p)
    p.write_text(base + '\n[remote.tiers.fast]\nupstreams = ["${FM_TEST_UP:-http://d:1}/"]\n')
    assert load_config(p).remote.tiers["fast"].upstreams == ["http://d:1"]
    monkeypatch.setenv("FM_TEST_UP", "http://127.0.0.1:9")
    assert load_config(p).remote.tiers["fast"].upstreams == ["http://127.0.0.1:9"]
    p.write_text(base + '\n[remote.tiers.fast]\nupstreams = ["${FM_TEST_UNSET_X}"]\n')
    with pytest.raises(ConfigError, match="FM_TEST_UNSET_X"):
        load_config(p)


def test_engine_config_serves_one_deployment() -> None:
    full = load_config()
    fast = engine_config(full, "fast")
    assert list(fast.deployments) == ["fast"] and list(fast.tiers) == ["fast"]
    # every model id the full config serves from the deployment: frontier and its aliases
    assert set(fast.routes) == {m for m, r in full.routes.items() if "fast" in r.roles().values()}
    assert "frontier" in fast.routes and "frontier-spark" not in fast.routes
    assert fast.routes["frontier"].standard == fast.routes["frontier"].fast == "fast"
    from fastmode.backends.engine import build

    derived = build(full.sim()).tiers["fast"].prices
    assert build(fast.sim()).tiers["fast"].prices == derived  # derived prices resolved
    spark = engine_config(full, "spark", replicas=1)
    assert set(spark.routes) == {m for m, r in full.routes.items()
                                 if "spark" in r.roles().values()}
    assert "frontier-spark" in spark.routes and spark.deployments["spark"].replicas == 1
    assert not spark.remote.tiers and not spark.auth.enabled
    with pytest.raises(ConfigError, match="allowed"):
        engine_config(full, "nope")


def test_deploy_config_is_valid_and_complete() -> None:
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[2] / "deploy" / "gateway-remote.toml")
    assert set(cfg.remote.tiers) == set(cfg.tiers)
    assert len(cfg.remote.tiers["standard"].upstreams) == 2
    for dep in cfg.deployments:
        engine_config(cfg, dep)
