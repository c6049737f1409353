"""``fastmode predict`` and ``fastmode simulate``: output shapes and one-line errors (exit 2)."""

from __future__ import annotations

import json

import pytest

from fastmode.cli import main
from fastmode.gateway.config import load_config

PREDICT_KEYS = {
    "ttft_s",
    "itl_s",
    "output_tokens_per_s_per_user",
    "output_tokens_per_s_total",
    "bound",
}
PLACEMENT = [
    "predict", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--chips", "4",
    "--precision", "bf16", "--batch", "32", "--prompt-tokens", "2000", "--output-tokens", "500",
]  # fmt: skip


def run_json(capsys, argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


def test_predict_placement_json(capsys):
    o = run_json(capsys, PLACEMENT)
    assert PREDICT_KEYS <= o.keys()
    assert o["output_tokens_per_s_per_user"] == pytest.approx(1 / o["itl_s"])
    # a closed loop: each user's request takes its TTFT plus (output - 1) inter-token gaps
    per_request = o["ttft_s"] + (o["output_tokens"] - 1) * o["itl_s"]
    assert o["output_tokens_per_s_total"] == pytest.approx(
        32 * o["output_tokens"] / per_request, rel=0.02)
    assert o["bound"] == "memory"
    assert o["weights_gb"] == pytest.approx(141.2)
    assert o["kv_capacity_tokens"] > 32 * 2500
    assert set(o["step_breakdown_s"]) >= {"weights_s", "compute_s", "kv_s", "comm_s"}
    assert o["ttft_s"] > o["itl_s"]


def test_predict_bigger_batch_is_slower_per_user_faster_in_total(capsys):
    small = run_json(capsys, [*PLACEMENT[:-6], "--batch", "1"])
    big = run_json(capsys, [*PLACEMENT[:-6], "--batch", "128"])
    assert small["output_tokens_per_s_per_user"] > big["output_tokens_per_s_per_user"]
    assert small["output_tokens_per_s_total"] < big["output_tokens_per_s_total"]


def test_predict_text_output(capsys):
    assert main(PLACEMENT) == 0
    out = capsys.readouterr().out
    for word in ("time to first token", "inter-token latency", "tok/s", "bound", "memory"):
        assert word in out


@pytest.mark.parametrize("tier", ["standard", "fast", "spark"])
def test_predict_tier_json(capsys, tier):
    o = run_json(capsys, ["predict", "--tier", tier])
    assert PREDICT_KEYS <= o.keys()
    prices = o["prices_usd_per_million_tokens"]
    assert set(prices) == {"input", "cached_input", "output"}
    assert o["price_factor"] > 0
    if tier == "standard":
        assert o["price_factor"] == 1.0 and prices["output"] == 25.0


def test_predict_tier_text(capsys):
    assert main(["predict", "--tier", "fast"]) == 0
    out = capsys.readouterr().out
    assert "price" in out and "derived" in out


def test_simulate_json_open_loop(capsys):
    o = run_json(capsys, ["simulate", "--rate", "5", "--duration", "5", "--seed", "3"])
    assert set(o["tiers"]) == {"standard", "fast", "spark"}
    assert o["run"]["requests"] == sum(t["requests"] for t in o["tiers"].values())
    assert o["run"]["steps"] > 0 and o["run"]["wall_s"] >= 0
    std = o["tiers"]["standard"]
    for key in ("ttft_s", "itl_s", "e2e_s"):
        assert set(std[key]) >= {"p50", "p90", "p99"}
    assert std["cost_usd"] == pytest.approx(
        std["completed"] * (2000 * 5.0 + 500 * 25.0) / 1e6
    )
    assert std["mean_batch"] >= std["background_seqs"]
    # same seed, same result
    again = run_json(capsys, ["simulate", "--rate", "5", "--duration", "5", "--seed", "3"])
    assert again["tiers"] == o["tiers"]


def test_simulate_closed_loop_and_distributions(capsys):
    o = run_json(
        capsys,
        [
            "simulate", "--concurrency", "8", "--duration", "5", "--mix", "fast=1",
            "--prompt-dist", "lognormal", "--output-dist", "uniform", "--output-tokens", "100",
        ],
    )  # fmt: skip
    assert set(o["tiers"]) == {"fast"}
    assert o["run"]["mode"] == "closed" and o["tiers"]["fast"]["completed"] > 8


def test_simulate_requests_bound_and_constant_arrivals(capsys):
    o = run_json(
        capsys, ["simulate", "--rate", "100", "--requests", "7", "--arrivals", "constant"]
    )
    assert o["run"]["requests"] == 7


def test_simulate_text_output(capsys):
    assert main(["simulate", "--rate", "2", "--duration", "3"]) == 0
    cap = capsys.readouterr()
    for word in ("TTFT p99", "ITL p50", "cost USD", "standard", "spark"):
        assert word in cap.out
    assert "steps/s" in cap.err and "wall time" in cap.err


BAD = [
    (["predict", "--model", "gpt-9", "--hardware", "h100-sxm", "--chips", "1"], "model: unknown"),
    (["predict", "--model", "llama-3.1-8b", "--hardware", "tpu", "--chips", "1"], "hardware: unknown"),
    (["predict", "--tier", "turbo"], "tier: unknown"),
    (
        ["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--chips", "1",
         "--precision", "fp3"],
        "precision: unknown",
    ),
    (["predict", "--model", "llama-3.1-405b", "--hardware", "h100-sxm", "--chips", "1"], "does not fit"),
    (["predict", "--model", "frontier-spark", "--hardware", "wse-3", "--chips", "2",
      "--precision", "fp8"], "does not fit"),
    (["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--chips", "0"], "chips"),
    (["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--chips", "-2"], "chips"),
    (["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--chips", "1",
      "--batch", "0"], "batch: must be > 0"),
    (["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--chips", "1",
      "--output-tokens", "-5"], "output-tokens: must be > 0"),
    (["predict", "--model", "llama-2-7b", "--hardware", "h100-sxm", "--chips", "1",
      "--prompt-tokens", "5000"], "context window"),
    (["predict", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--chips", "1",
      "--precision", "fp8", "--prompt-tokens", "120000"], "KV cache"),
    (["predict", "--tier", "spark", "--prompt-tokens", "200000"], "context window"),
    (["predict", "--tier", "fast", "--prompt-tokens", "0"], "prompt-tokens: must be > 0"),
    (["predict", "--hardware", "h100-sxm"], "required without --tier"),
    (["predict", "--tier", "fast", "--model", "frontier"], "cannot be combined"),
    (["predict", "--tier", "fast", "--config", "/nonexistent.toml"], "config: cannot read"),
    (["simulate", "--mix", "standard=1,turbo=2"], "mix: unknown tier 'turbo'"),
    (["simulate", "--mix", "standard"], "mix: expected"),
    (["simulate", "--mix", "standard=-1"], "mix: share"),
    (["simulate", "--rate", "0"], "rate: must be > 0"),
    (["simulate", "--concurrency", "-3"], "concurrency: must be > 0"),
    (["simulate", "--duration", "0"], "duration: must be > 0"),
    (["simulate", "--requests", "0"], "requests: must be > 0"),
    (["simulate", "--prompt-tokens", "0"], "prompt-tokens: must be > 0"),
    (["simulate", "--prompt-dist", "zipf"], "prompt-dist: unknown 'zipf'; allowed"),
    (["simulate", "--arrivals", "bursty"], "arrivals: unknown 'bursty'; allowed"),
    (["simulate", "--prompt-tokens", "150000"], "context window of tier spark"),
]  # fmt: skip


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a[:3]) + f" {m}" for a, m in BAD])
def test_bad_input_is_a_one_line_error_with_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fastmode {argv[0]}: error: ")
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unknown_names_list_the_allowed_values(capsys):
    main(["predict", "--model", "gpt-9", "--hardware", "h100-sxm", "--chips", "1"])
    assert "llama-3.1-70b" in capsys.readouterr().err
    tiers = ", ".join(sorted(load_config().tiers))  # the default config's tiers
    main(["predict", "--tier", "turbo"])
    assert f"allowed: {tiers}" in capsys.readouterr().err
    main(["simulate", "--mix", "turbo=1"])
    assert f"allowed: {tiers}" in capsys.readouterr().err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--chips", "many"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--rate", "1", "--concurrency", "2"])
    assert exc.value.code == 2


# -- every hardware, precision and placement option -------------------------------

NEW_HARDWARE = ["mi300x", "mi325x", "mi355x", "gh200", "gb200-nvl72", "gb300-nvl72", "b300"]


@pytest.mark.parametrize("hardware", NEW_HARDWARE)
@pytest.mark.parametrize("precision", ["bf16", "fp8", "fp4", "nvfp4", "mxfp4"])
def test_predict_accepts_every_hardware_and_precision(capsys, hardware, precision):
    o = run_json(capsys, ["predict", "--model", "llama-3.1-70b", "--hardware", hardware,
                          "--chips", "2", "--precision", precision, "--batch", "8"])
    assert o["hardware"] == hardware and o["itl_s"] > 0 and o["kv_capacity_tokens"] > 0


def test_predict_defaults_to_the_checkpoints_precision_and_takes_bf16_experts(capsys):
    mx = run_json(capsys, ["predict", "--model", "gpt-oss-120b", "--hardware", "h100-sxm",
                           "--chips", "4", "--batch", "4"])
    bf = run_json(capsys, ["predict", "--model", "gpt-oss-120b", "--hardware", "h100-sxm",
                           "--chips", "4", "--batch", "4", "--precision", "bf16"])
    assert mx["precision"] == "mxfp4" and bf["precision"] == "bf16"
    assert bf["weights_gb"] > 3 * mx["weights_gb"]
    assert bf["itl_s"] > mx["itl_s"]


@pytest.mark.parametrize("extra", [
    ["--attention-dp"],
    ["--expert-parallel", "8"],
    ["--attention-dp", "--expert-parallel", "8", "--engine", "sglang"],
    ["--engine", "trtllm", "--memory-fraction", "0.85"],
    ["--speculative", "mtp", "--draft-tokens", "3", "--acceptance", "0.74"],
    ["--prefill-chips", "8"],
    ["--arrivals", "poisson", "--rate", "0.5"],
])
def test_predict_accepts_every_placement_option(capsys, extra):
    o = run_json(capsys, ["predict", "--model", "deepseek-v3", "--hardware", "h200",
                          "--chips", "8", "--batch", "16", *extra])
    assert o["itl_s"] > 0 and o["ttft_s"] > 0
    if "--prefill-chips" in extra:
        assert o["chips_total"] == 16 and o["prefill_s"] > 0
    if "--rate" in extra:
        assert o["arrivals"] == "poisson"
        assert o["output_tokens_per_s_total"] == pytest.approx(0.5 * o["output_tokens"])


def test_predict_with_an_engine_counts_its_time_to_first_token(capsys):
    base = ["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--chips", "1",
            "--batch", "1", "--prompt-tokens", "500", "--output-tokens", "50"]
    bare = run_json(capsys, base)
    vllm = run_json(capsys, [*base, "--engine", "vllm"])
    assert vllm["ttft_s"] > bare["ttft_s"]


@pytest.mark.parametrize("argv,flag", [
    (["--engine", "tgi9"], "engine"),
    (["--expert-parallel", "3"], "expert_parallel"),
    (["--arrivals", "poisson"], "rate"),
    (["--rate", "2"], "rate"),
    (["--precision", "fp3"], "precision"),
    (["--arrivals", "poisson", "--rate", "100000"], "rate"),
])
def test_predict_rejects_bad_options_with_one_line(capsys, argv, flag):
    code = main(["predict", "--model", "deepseek-v3", "--hardware", "h200", "--chips", "8",
                 *argv])
    assert code == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1


def test_predict_refuses_mtp_on_a_model_without_an_mtp_layer(capsys):
    """``--speculative mtp`` drafts with the model's own multi-token-prediction module: Llama
    ships none, so it is a one-line error (exit 2), not a made-up draft; DeepSeek-V3 has one."""
    assert main(["predict", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--chips",
                 "4", "--batch", "4", "--speculative", "mtp"]) == 2
    err = capsys.readouterr().err
    assert "llama-3.1-70b has no multi-token-prediction layer" in err
    assert len(err.strip().splitlines()) == 1
