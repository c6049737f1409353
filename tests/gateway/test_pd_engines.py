"""Prefill/decode across two engines through vLLM's ``kv_transfer_params`` (NIXL's exchange).

A proxy (this test, as llm-d's routing sidecar does) sends a request to a prefill engine with
``max_tokens: 1`` and ``do_remote_decode``, takes the ``kv_transfer_params`` it answers and
sends the request with them to a decode engine. On the virtual clock the prefill engine's time
to first token is the prompt's prefill step, and the decode engine's is the KV transfer (the
model's KV bytes per token x the blocks' tokens over the link) plus the step that computes the
prompt's last token."""

from __future__ import annotations

from typing import Any

import pytest
from virtual_app import app_client, run_app_virtual

from fastmode.backends.config import BackgroundConfig
from fastmode.backends.perf import prefill_attention_context
from fastmode.backends.perf_modes import kv_transfer_seconds
from fastmode.cli import build_parser
from fastmode.cli.engine import apply_flags
from fastmode.gateway.config import Config, ConfigError, load_config
from fastmode.gateway.engine_config import engine_config

DEPLOYMENT = "oss"
NIXL = '{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cuda"}'
PROMPT = list(range(1000, 2024))  # 1,024 token ids: 64 full blocks of 16
PREFILL_ASK = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
               "remote_block_ids": None, "remote_host": None, "remote_port": None}


def engine(*flags: str) -> Config:
    """``fastmode engine --deployment oss -dp 1 FLAGS``, without the other tenants' load (the
    figures below are one request's alone)."""
    args, extra = build_parser().parse_known_args(["engine", "--deployment", DEPLOYMENT,
                                                   "-dp", "1", *flags])
    args.ignored = extra
    cfg = engine_config(apply_flags(load_config(), args), DEPLOYMENT, args.replicas)
    dep = cfg.deployments[DEPLOYMENT].model_copy(update={"background": BackgroundConfig()})
    return cfg.model_copy(update={"deployments": {DEPLOYMENT: dep}})


def ttft(body: dict[str, Any]) -> float:
    info = body["time_info"]
    return float(info["queue_time"] + info["prompt_time"])


def test_pd_round_trip_times_on_the_virtual_clock() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine("--kv-transfer-config", NIXL), "http://p") as prefill, \
                app_client(engine("--kv-transfer-config", NIXL), "http://d") as decode:
            model = (await prefill.get("/v1/models")).json()["data"][0]["id"]
            first = await prefill.post("/v1/completions", json={
                "model": model, "prompt": PROMPT, "max_tokens": 1,
                "kv_transfer_params": PREFILL_ASK})
            assert first.status_code == 200, first.text
            p = first.json()
            params = p["kv_transfer_params"]
            assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
            assert len(params["remote_block_ids"]) == len(PROMPT) // 16
            assert params["remote_host"] == "localhost" and params["remote_port"] == 5600
            assert params["tp_size"] == 1 and params["remote_request_id"]
            assert isinstance(params["remote_engine_id"], str) and params["remote_engine_id"]
            p_sched = prefill.app.state.gateway.deployments[DEPLOYMENT].replicas[0].scheduler
            prefill_step = p_sched.step_seconds(0, 0, len(PROMPT),
                                                prefill_attention_context(len(PROMPT), 0))
            assert ttft(p) == pytest.approx(prefill_step, rel=1e-9)

            second = await decode.post("/v1/completions", json={
                "model": model, "prompt": PROMPT, "max_tokens": 20, "ignore_eos": True,
                "kv_transfer_params": params})
            assert second.status_code == 200, second.text
            d = second.json()
            assert d["kv_transfer_params"] is None
            spec = decode.app.state.gateway.spec.deployments[DEPLOYMENT]
            read = len(PROMPT) - 1  # every block, the last token recomputed
            transfer = kv_transfer_seconds(spec.placement, params["tp_size"], read)
            assert transfer == pytest.approx(
                spec.placement.hardware.interconnect_latency_us * 1e-6
                + read * spec.placement.kv_bytes_per_token
                / (spec.placement.hardware.interconnect_gbs * 1e9))
            d_sched = decode.app.state.gateway.deployments[DEPLOYMENT].replicas[0].scheduler
            first_step = d_sched.step_seconds(0, 0, 1, prefill_attention_context(1, read))
            assert ttft(d) == pytest.approx(transfer + first_step, rel=1e-9)
            assert d["usage"]["prompt_tokens_details"]["cached_tokens"] == read
            assert ttft(d) < ttft(p) + transfer  # the decoder never prefilled the prompt

    run_app_virtual(main)


def test_link_bandwidth_setting_sets_the_transfer() -> None:
    slow = NIXL[:-1] + ', "link_gbs": 1.0}'

    async def main(loop: Any) -> None:
        async with app_client(engine("--kv-transfer-config", slow)) as decode:
            model = (await decode.get("/v1/models")).json()["data"][0]["id"]
            params = {"do_remote_prefill": True, "remote_block_ids": list(range(64)),
                      "remote_engine_id": "p0", "remote_host": "localhost",
                      "remote_port": 5600, "tp_size": 2}
            r = await decode.post("/v1/completions", json={
                "model": model, "prompt": PROMPT, "max_tokens": 2, "kv_transfer_params": params})
            spec = decode.app.state.gateway.spec.deployments[DEPLOYMENT]
            read = len(PROMPT) - 1
            transfer = kv_transfer_seconds(spec.placement, 2, read, 1.0)
            assert transfer == pytest.approx(
                spec.placement.hardware.interconnect_latency_us * 1e-6
                + read * spec.placement.kv_bytes_per_token / (1e9 * 2))
            sched = decode.app.state.gateway.deployments[DEPLOYMENT].replicas[0].scheduler
            first_step = sched.step_seconds(0, 0, 1, prefill_attention_context(1, read))
            assert ttft(r.json()) == pytest.approx(transfer + first_step, rel=1e-9)

    run_app_virtual(main)


def test_chat_completions_take_part_too() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine("--kv-transfer-config", NIXL)) as prefill:
            model = (await prefill.get("/v1/models")).json()["data"][0]["id"]
            r = await prefill.post("/v1/chat/completions", json={
                "model": model, "max_tokens": 1, "kv_transfer_params": PREFILL_ASK,
                "messages": [{"role": "user", "content": "word " * 200}]})
            assert r.status_code == 200
            params = r.json()["kv_transfer_params"]
            prompt = r.json()["usage"]["prompt_tokens"]
            assert len(params["remote_block_ids"]) == prompt // 16

    run_app_virtual(main)


def test_without_a_connector_the_params_are_ignored() -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine()) as plain:
            model = (await plain.get("/v1/models")).json()["data"][0]["id"]
            r = await plain.post("/v1/completions", json={
                "model": model, "prompt": PROMPT, "max_tokens": 1,
                "kv_transfer_params": PREFILL_ASK})
            assert r.status_code == 200 and r.json()["kv_transfer_params"] is None
            d = await plain.post("/v1/completions", json={
                "model": model, "prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": {
                    "do_remote_prefill": True, "remote_block_ids": list(range(64))}})
            assert d.json()["usage"]["prompt_tokens_details"]["cached_tokens"] < len(PROMPT) - 1

    run_app_virtual(main)


@pytest.mark.parametrize("text", ['{"kv_connector": ', '{"kv_connector": "NixlConnector", '
                                  '"kv_role": "kv_everything"}', '{"link_gbs": 0}'])
def test_bad_kv_transfer_config_names_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--kv-transfer-config"):
        engine("--kv-transfer-config", text)


@pytest.mark.parametrize("params,param", [
    ({"do_remote_prefill": True, "remote_block_ids": "0,1"}, "remote_block_ids"),
    ({"do_remote_prefill": True, "remote_block_ids": [-1]}, "remote_block_ids"),
    ({"do_remote_prefill": True, "remote_block_ids": list(range(10**5))}, "remote_block_ids"),
    ({"do_remote_prefill": True, "remote_block_ids": [0], "tp_size": 0}, "tp_size"),
    ({"do_remote_prefill": "yes"}, "do_remote_prefill"),
    ({"do_remote_prefill": True, "do_remote_decode": True}, "kv_transfer_params"),
])
def test_bad_params_are_a_400(params: dict[str, Any], param: str) -> None:
    async def main(loop: Any) -> None:
        async with app_client(engine("--kv-transfer-config", NIXL)) as decode:
            model = (await decode.get("/v1/models")).json()["data"][0]["id"]
            r = await decode.post("/v1/completions", json={
                "model": model, "prompt": PROMPT, "max_tokens": 2, "kv_transfer_params": params})
            assert r.status_code == 400
            assert param in r.json()["error"]["param"]

    run_app_virtual(main)
