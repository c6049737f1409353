"""An engine's vLLM routes: /tokenize and /detokenize in vLLM's shapes, X-Request-Id echo,
sleep / wake with the modeled wake time, and `fastmode engine`'s vLLM flags."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from conftest import asgi_client

from fastmode.backends.sleep import wake_seconds
from fastmode.backends.tokenizer import count_chat_prompt, count_tokens
from fastmode.cli import build_parser
from fastmode.cli.engine import apply_flags, ignored_warning
from fastmode.gateway.app import create_app
from fastmode.gateway.config import ConfigError, load_config
from fastmode.gateway.engine_config import engine_config

TEXT = "Continuous batching keeps the GPU busy: 42 sequences share one step."
USER = [{"role": "user", "content": TEXT}]


@pytest.fixture
async def engine() -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(engine_config(load_config(), "spark"), "http://e") as client:
        yield client


async def model_of(client: httpx.AsyncClient) -> str:
    return (await client.get("/v1/models")).json()["data"][0]["id"]


async def test_tokenize_prompt_and_back(engine) -> None:
    r = await engine.post("/tokenize", json={"prompt": TEXT, "return_token_strs": True})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"count", "max_model_len", "tokens", "token_strs"}
    assert body["count"] == len(body["tokens"]) == count_tokens(TEXT)
    assert "".join(body["token_strs"]) == TEXT
    assert all(isinstance(t, int) and 0 <= t < 1 << 32 for t in body["tokens"])
    model = await model_of(engine)
    card = (await engine.get(f"/v1/models/{model}")).json()
    assert body["max_model_len"] == card["context_window"]
    back = await engine.post("/detokenize", json={"model": model, "tokens": body["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": TEXT}
    # the same text tokenizes to the same ids in any engine process (no per-process state)
    other = create_app(engine_config(load_config(), "spark"))
    assert other.state.gateway.engine.vocabulary.encode(TEXT) == body["tokens"]


async def test_tokenize_chat_counts_as_the_prompt_is_billed(engine) -> None:
    r = await engine.post("/tokenize", json={"messages": USER})
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == count_chat_prompt(USER)
    assert body["token_strs"] is None
    no_prompt = (await engine.post("/tokenize", json={"messages": USER,
                                                      "add_generation_prompt": False})).json()
    assert no_prompt["tokens"] == body["tokens"][:no_prompt["count"]]
    assert no_prompt["count"] < body["count"]


@pytest.mark.parametrize("body,status", [
    ({"prompt": 3}, 400),
    ({"messages": "hi"}, 400),
    ({}, 400),
    ({"prompt": "x", "model": "no-such-model"}, 404),
])
async def test_tokenize_bad_input(engine, body, status) -> None:
    r = await engine.post("/tokenize", json=body)
    assert r.status_code == status
    assert "message" in r.json()["error"]


async def test_detokenize_unknown_id(engine) -> None:
    ids = (await engine.post("/tokenize", json={"prompt": "hello"})).json()["tokens"]
    r = await engine.post("/detokenize", json={"tokens": [*ids, 12345678]})
    assert r.status_code == 400
    assert "12345678" in r.json()["error"]["message"]
    assert (await engine.post("/detokenize", json={"tokens": "abc"})).status_code == 400
    assert (await engine.post("/detokenize", content=b"{not json")).status_code == 400


async def test_request_id_echo(engine) -> None:
    model = await model_of(engine)
    chat = {"model": model, "messages": USER, "max_tokens": 4}
    r = await engine.post("/v1/chat/completions", json=chat, headers={"X-Request-Id": "abc-123"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "abc-123"
    async with engine.stream("POST", "/v1/chat/completions", json={**chat, "stream": True},
                             headers={"X-Request-Id": "s-9"}) as s:
        assert s.headers["x-request-id"] == "s-9"
        await s.aread()
    bad = await engine.post("/v1/chat/completions", json={"model": model},
                            headers={"X-Request-Id": "bad-1"})
    assert bad.status_code == 400 and bad.headers["x-request-id"] == "bad-1"
    plain = await engine.post("/v1/chat/completions", json=chat)
    assert plain.headers["x-request-id"] != "abc-123"


async def test_gateway_keeps_its_own_ids() -> None:
    app = create_app(load_config())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://g") as c:
            model = (await c.get("/v1/models")).json()["data"][0]["id"]
            r = await c.post("/v1/chat/completions", headers={"X-Request-Id": "mine"},
                             json={"model": model, "messages": USER, "max_tokens": 2})
            assert r.headers["x-request-id"] != "mine"
            assert (await c.post("/tokenize", json={"prompt": "x"})).status_code == 404


async def test_sleep_and_wake(engine) -> None:
    model = await model_of(engine)
    chat = {"model": model, "messages": USER, "max_tokens": 2}
    assert (await engine.get("/is_sleeping")).json() == {"is_sleeping": False}
    assert (await engine.post("/sleep?level=3")).status_code == 400
    assert (await engine.post("/sleep?level=1")).status_code == 200
    assert (await engine.get("/is_sleeping")).json() == {"is_sleeping": True}
    asleep = await engine.post("/v1/chat/completions", json=chat)
    assert asleep.status_code == 503
    assert "sleeping" in asleep.json()["error"]["message"]
    assert (await engine.get("/health")).status_code == 200
    woke = await engine.post("/wake_up")
    assert woke.status_code == 200
    dep = engine.app.state.gateway.spec.deployments["spark"]
    expected = wake_seconds(dep.placement.weight_bytes_per_chip, dep.placement.hardware.name)
    assert float(woke.headers["x-fastmode-wake-seconds"]) == pytest.approx(expected, abs=1e-6)
    assert expected > 0
    assert (await engine.get("/is_sleeping")).json() == {"is_sleeping": False}
    assert (await engine.post("/v1/chat/completions", json=chat)).status_code == 200
    again = await engine.post("/wake_up")  # awake: nothing to copy
    assert float(again.headers["x-fastmode-wake-seconds"]) == 0


def test_wake_time_follows_the_host_link() -> None:
    assert wake_seconds(55e9, "h100-sxm") == pytest.approx(1.0)
    assert wake_seconds(450e9, "gh200") == pytest.approx(1.0)


def parse(*argv: str):
    parser = build_parser()
    args, extra = parser.parse_known_args(["engine", "--deployment", "spark", *argv])
    args.ignored = extra
    return args


def test_engine_flags_map_to_the_deployment() -> None:
    args = parse("--max-num-seqs", "32", "--max-num-batched-tokens", "2048",
                 "--gpu-memory-utilization", "0.8", "--no-enable-prefix-caching",
                 "--served-model-name", "my-model", "-dp", "2")
    cfg = engine_config(apply_flags(load_config(), args), "spark", args.replicas,
                        args.served_model_name)
    dep = cfg.deployments["spark"]
    assert (dep.max_batch, dep.max_batched_tokens, dep.memory_utilization) == (32, 2048, 0.8)
    assert dep.prefix_caching is False and dep.replicas == 2
    assert list(cfg.routes) == ["my-model"]
    assert cfg.server.engine


def test_engine_ignores_other_vllm_flags() -> None:
    args = parse("meta-llama/Llama-3.1-8B", "--dtype", "bfloat16", "--trust-remote-code")
    assert args.ignored == ["meta-llama/Llama-3.1-8B", "--dtype", "bfloat16",
                            "--trust-remote-code"]
    line = ignored_warning(args.ignored)
    assert line is not None and "\n" not in line and "--dtype bfloat16" in line
    assert ignored_warning([]) is None
    with pytest.raises(ConfigError, match="--max-num-seqs"):
        apply_flags(load_config(), parse("--max-num-seqs", "0"))


def test_other_commands_still_refuse_unknown_flags(capsys) -> None:
    from fastmode.cli import main
    with pytest.raises(SystemExit):
        main(["predict", "--no-such-flag"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_engine_help_reads_like_vllm_serve(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["engine", "--help"])
    out = capsys.readouterr().out
    for flag in ("--max-num-seqs", "--served-model-name", "--tensor-parallel-size",
                 "--enable-prefix-caching", "--data-parallel-size", "--enable-lora",
                 "--lora-modules", "--max-loras", "--max-lora-rank", "--kv-transfer-config"):
        assert flag in out
