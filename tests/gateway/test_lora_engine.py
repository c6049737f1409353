"""LoRA adapters on an engine, as a LoRA-aware router sees them (vLLM's surface, virtual clock).

An engine started with ``--enable-lora --lora-modules ... --max-loras 1`` lists its adapters
in ``/v1/models`` with their parent, serves a request whose ``model`` names one on it, holds a
request for a second adapter in its queue while the batch runs the first (requests for the base
model go ahead), and says so in ``vllm:lora_requests_info``, which a router reads to send each
adapter's requests where it runs. Run-time loading is vLLM's: gated, its shapes and errors."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from virtual_app import app_client, run_app_virtual, until

from fastmode.cli import build_parser
from fastmode.cli._vllm_features import RUNTIME_LORA_ENV
from fastmode.cli.engine import apply_flags
from fastmode.gateway.config import ConfigError, load_config
from fastmode.gateway.engine_config import engine_config

DEPLOYMENT = "oss"
PROMPT = "Translate the question into SQL: which users signed up last week? " * 8
LORA_INFO = re.compile(r'^vllm:lora_requests_info\{max_lora="(\d+)",waiting_lora_adapters="'
                       r'([^"]*)",running_lora_adapters="([^"]*)"\} (\S+)$', re.M)


def engine(*flags: str) -> Any:
    """The config ``fastmode engine --deployment oss -dp 1 FLAGS`` serves."""
    args, extra = build_parser().parse_known_args(["engine", "--deployment", DEPLOYMENT,
                                                   "-dp", "1", *flags])
    args.ignored = extra
    return engine_config(apply_flags(load_config(), args), DEPLOYMENT, args.replicas)


LORA = ("--enable-lora", "--lora-modules", "sql=/adapters/sql",
        '{"name": "chat", "path": "/adapters/chat", "rank": 8}', "--max-loras", "1")


def lora_info(text: str) -> dict[str, Any]:
    """The newest series of the gauge, as the Inference Extension's endpoint picker reads it:
    the one with the largest value (a timestamp)."""
    series = [(float(v), m, r, w) for m, w, r, v in LORA_INFO.findall(text)]
    assert series, "no vllm:lora_requests_info series"
    _, max_lora, running, waiting = max(series)
    return {"max_lora": int(max_lora), "running": [a for a in running.split(",") if a],
            "waiting": [a for a in waiting.split(",") if a]}


def score(info: dict[str, Any], adapter: str) -> float:
    """A LoRA-affinity scorer's preference (the Inference Extension's: where the adapter runs,
    else where a slot is free, else nowhere)."""
    if adapter in info["running"]:
        return 1.0
    return 0.8 if len(info["running"]) < info["max_lora"] else 0.0


async def base_model(client: httpx.AsyncClient) -> str:
    cards = (await client.get("/v1/models")).json()["data"]
    return next(c["id"] for c in cards if c["parent"] is None)


def test_models_list_adapters_with_their_parent() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine(*LORA)) as client:
            cards = (await client.get("/v1/models")).json()["data"]
            base = await base_model(client)
            adapters = {c["id"]: c for c in cards if c["parent"] is not None}
            assert set(adapters) == {"sql", "chat"}
            assert adapters["sql"]["parent"] == base and adapters["sql"]["root"] == "/adapters/sql"
            assert adapters["chat"]["root"] == "/adapters/chat"
            one = (await client.get("/v1/models/sql")).json()
            assert one["id"] == "sql" and one["parent"] == base
            base_card = next(c for c in cards if c["id"] == base)
            assert base_card["max_model_len"] == base_card["context_window"]

    run_app_virtual(main)


def test_a_cold_adapter_waits_while_max_loras_is_full_and_the_router_sees_it() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine(*LORA)) as client:
            base = await base_model(client)

            async def complete(model: str, tokens: int) -> tuple[float, dict[str, Any]]:
                t = loop.time()
                r = await client.post("/v1/completions", json={
                    "model": model, "prompt": PROMPT, "max_tokens": tokens, "ignore_eos": True})
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["model"] == model  # vLLM answers with the adapter's name
                return t, body["time_info"]

            async def info_is(expected: dict[str, Any]) -> bool:
                return lora_info((await client.get("/metrics")).text) == expected

            first = asyncio.create_task(complete("sql", 400))
            await until(lambda: info_is({"max_lora": 1, "running": ["sql"], "waiting": []}),
                        "sql's request in the batch")
            cold = asyncio.create_task(complete("chat", 20))
            plain = asyncio.create_task(complete(base, 20))
            info = {"max_lora": 1, "running": ["sql"], "waiting": ["chat"]}
            await until(lambda: info_is(info), "chat's request waiting for the adapter slot")
            # a router sends sql's requests here and chat's to an engine with a free slot
            engines = {"this": info, "idle": {"max_lora": 1, "running": [], "waiting": []}}
            assert max(engines, key=lambda e: score(engines[e], "sql")) == "this"
            assert max(engines, key=lambda e: score(engines[e], "chat")) == "idle"
            (t_first, first_info), (t_cold, cold_info), (t_plain, plain_info) = (
                await asyncio.gather(first, cold, plain))
            first_end = t_first + first_info["total_time"]
            assert t_cold + cold_info["queue_time"] >= first_end - 1e-9  # once sql's left
            # the base model's request, queued behind chat's, went ahead of it
            assert t_plain + plain_info["queue_time"] < first_end
            slots = client.app.state.gateway.deployments[DEPLOYMENT].replicas[0].scheduler.lora
            assert slots.loads == 2  # sql, then chat into the one slot

    run_app_virtual(main)


def test_unknown_adapter_is_a_404_in_the_error_shape() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine(*LORA)) as client:
            r = await client.post("/v1/chat/completions", json={
                "model": "no-such-adapter", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 404
            assert r.json() == {"error": {  # vLLM's ErrorResponse
                "message": "The model `no-such-adapter` does not exist.",
                "type": "NotFoundError", "param": "model", "code": 404}}

    run_app_virtual(main)


def test_an_adapters_blocks_are_its_own() -> None:
    """vLLM hashes the adapter's name into every block: the base model's cached prefix is no
    hit for an adapter, the adapter's own is."""
    async def main(loop: Any) -> None:
        async with app_client(engine(*LORA)) as client:
            base = await base_model(client)

            async def cached(model: str) -> int:
                r = await client.post("/v1/completions", json={
                    "model": model, "prompt": PROMPT, "max_tokens": 2})
                return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

            assert await cached(base) == 0
            assert await cached(base) > 0
            assert await cached("sql") == 0
            assert await cached("sql") > 0

    run_app_virtual(main)


def test_runtime_loading_is_off_unless_allowed() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine(*LORA)) as client:
            r = await client.post("/v1/load_lora_adapter",
                                  json={"lora_name": "x", "lora_path": "/x"})
            assert r.status_code == 404  # vLLM registers the route only when allowed

    run_app_virtual(main)


def test_runtime_load_and_unload_in_vllms_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNTIME_LORA_ENV, "True")  # as vLLM reads it from its environment
    cfg = engine(*LORA)

    async def main(loop: Any) -> None:
        async with app_client(cfg) as client:
            r = await client.post("/v1/load_lora_adapter",
                                  json={"lora_name": "fresh", "lora_path": "/adapters/fresh"})
            assert r.status_code == 200
            assert r.text == "Success: LoRA adapter 'fresh' added successfully."
            ids = [c["id"] for c in (await client.get("/v1/models")).json()["data"]]
            assert "fresh" in ids
            ok = await client.post("/v1/completions", json={"model": "fresh", "prompt": "hi",
                                                            "max_tokens": 2})
            assert ok.status_code == 200
            again = await client.post("/v1/load_lora_adapter",
                                      json={"lora_name": "fresh", "lora_path": "/a"})
            assert again.status_code == 400
            assert again.json() == {"error": {
                "message": "The lora adapter 'fresh' has already been loaded. If you want to "
                           "load the adapter in place, set 'load_inplace' to True.",
                "type": "InvalidUserInput", "param": None, "code": 400}}
            inplace = await client.post("/v1/load_lora_adapter", json={
                "lora_name": "fresh", "lora_path": "/b", "load_inplace": True})
            assert inplace.status_code == 200
            too_big = await client.post("/v1/load_lora_adapter", json={
                "lora_name": "big", "lora_path": "/big", "rank": 64})
            assert too_big.status_code == 400 and "max_lora_rank" in too_big.json()["error"][
                "message"]
            missing = await client.post("/v1/load_lora_adapter", json={"lora_name": "m"})
            assert missing.status_code == 400
            assert missing.json()["error"]["type"] == "BadRequestError"
            gone = await client.post("/v1/unload_lora_adapter", json={"lora_name": "nope"})
            assert gone.status_code == 404
            assert gone.json()["error"] == {
                "message": "The lora adapter 'nope' cannot be found.",
                "type": "NotFoundError", "param": None, "code": 404}
            out = await client.post("/v1/unload_lora_adapter", json={"lora_name": "fresh"})
            assert out.status_code == 200
            assert out.text == "Success: LoRA adapter 'fresh' removed successfully."
            after = await client.post("/v1/completions", json={"model": "fresh", "prompt": "hi"})
            assert after.status_code == 404

    run_app_virtual(main)


@pytest.mark.parametrize("flags,match", [
    (("--lora-modules", "no-equals-sign"), "--lora-modules"),
    (("--lora-modules", "{not json"), "--lora-modules"),
    (("--lora-modules", '{"name": "a", "path": "/a", "rank": 32}'), "max_lora_rank"),
    (("--enable-lora", "--max-lora-rank", "12"), "max_lora_rank"),
    (("--enable-lora", "--max-loras", "0"), "--max-loras"),
])
def test_bad_lora_flags_name_the_flag(flags: tuple[str, ...], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        engine(*flags)
