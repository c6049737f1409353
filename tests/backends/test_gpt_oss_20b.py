"""gpt-oss-20b: its profile is the checkpoint's (config.json, the model card, the safetensors
index), `fastmode predict` takes it, and the 1.2 perf overview's GPT-OSS 20B table is in the
calibration set under the conditions of the page's gpt-oss-120b rows (docs/calibration.md)."""

from __future__ import annotations

import json

import pytest

from fastmode.backends.calibrate import load_published
from fastmode.backends.calibrate.scope import scored_only_reason
from fastmode.backends.perf import Placement
from fastmode.backends.profiles import Catalog
from fastmode.cli import main

CAT = Catalog.builtin()
V12 = "trtllm-perf-overview-v12"
# model.safetensors.index.json of openai/gpt-oss-20b: metadata total_size
CHECKPOINT_BYTES = 13_761_264_768
# the page's GPT-OSS 20B table (ISL/OSL -> B200, GB200, H200, H100 tok/s/GPU; None = empty)
TABLE = {
    (1000, 1000): (53812, 55823, 13858, 11557),
    (1024, 1024): (53491, 56528, 13890, 11403),
    (1024, 8192): (34702, 38100, 12743, 8617),
    (1024, 32768): (14589, 16463, None, None),
    (8192, 1024): (11904, 12941, 4015, 3366),
    (32768, 1024): (2645, 2905, 915, 785),
}
COLUMNS = ("b200", "gb200-nvl72", "h200", "h100-sxm")
REQUESTS = {(1000, 1000): 3000, (1024, 1024): 3000, (1024, 8192): 1500, (8192, 1024): 1500,
            (1024, 32768): 1000, (32768, 1024): 1000}


def test_the_profile_has_the_configs_shape():
    m = CAT.get_model("gpt-oss-20b")
    big = CAT.get_model("gpt-oss-120b")
    assert (m.layers, m.d_model, m.heads, m.kv_heads, m.head_dim) == (24, 2880, 64, 8, 64)
    assert (m.vocab, m.context_window) == (201088, 131072)
    assert (m.experts, m.experts_per_token) == (32, 4) and m.is_moe and not m.is_mla
    assert m.default_precision == big.default_precision == "mxfp4"
    # the same architecture as gpt-oss-120b: per layer the same attention, the same expert
    assert m.attention_params / m.layers == pytest.approx(big.attention_params / big.layers)
    assert m.expert_params_b / (m.layers * m.experts) == pytest.approx(
        big.expert_params_b / (big.layers * big.experts), rel=0.01)


def test_its_parameters_recompute_from_the_config():
    m = CAT.get_model("gpt-oss-20b")
    # experts: gate_up 2880 x 5760 and down 2880 x 2880 with their biases, 32 x 24 of them
    per_expert = 2880 * 5760 + 5760 + 2880 * 2880 + 2880
    assert m.expert_params_b == pytest.approx(per_expert * 32 * 24 / 1e9, rel=0.005)
    # the model card: attention 0.64B, embed + unembed 1.16B, 20.9B in all
    assert m.attention_params == pytest.approx(0.64, rel=0.01)
    assert m.embedding_params_b == pytest.approx(1.16, rel=0.01)
    assert m.dense_params_b == pytest.approx(m.attention_params + m.embedding_params_b, rel=0.01)
    # active per token as the card counts it (without the input embedding's row lookup)
    active = m.dense_params_b + m.expert_params_b * 4 / 32 - m.input_embedding_params_b
    assert active == pytest.approx(m.active_params_b, rel=0.01)


def test_its_weight_bytes_are_the_checkpoints():
    """MXFP4 experts (4.25 bits) and the 1.8B dense part in bf16: the checkpoint's bytes; a
    dequantised bf16 checkpoint is 3x larger."""
    m = CAT.get_model("gpt-oss-20b")
    assert m.weight_bytes("mxfp4") == pytest.approx(CHECKPOINT_BYTES, rel=0.01)
    assert m.kept_bf16_params_b("mxfp4") == pytest.approx(1.8)
    assert m.weight_bytes("bf16") == pytest.approx(2 * 20.9e9)
    p = Placement(m, CAT.get_hardware("h100-sxm"), 1, "mxfp4", 0.9)
    assert p.weight_bytes == pytest.approx(CHECKPOINT_BYTES, rel=0.01)


def test_predict_takes_it(capsys: pytest.CaptureFixture[str]):
    argv = ["predict", "--model", "gpt-oss-20b", "--hardware", "h100-sxm", "--chips", "1",
            "--batch", "8", "--json"]
    assert main(argv) == 0
    o = json.loads(capsys.readouterr().out)
    assert o["model"] == "gpt-oss-20b" and o["precision"] == "mxfp4"
    assert o["weights_gb"] == pytest.approx(CHECKPOINT_BYTES / 1e9, rel=0.01)
    assert o["itl_s"] > 0 and o["kv_capacity_tokens"] > 0
    # a quarter of gpt-oss-120b's active experts' bytes and fewer layers: a faster decode
    assert main([*argv[:2], "gpt-oss-120b", *argv[3:]]) == 0
    big = json.loads(capsys.readouterr().out)
    assert o["itl_s"] < big["itl_s"]


def test_the_pages_gpt_oss_20b_table_is_in_the_set():
    _, figs = load_published()
    rows = {(f.prompt_tokens, f.output_tokens, f.hardware): f for f in figs
            if f.source == V12 and f.model == "gpt-oss-20b"}
    expected = {(isl, osl, hw): v for (isl, osl), vals in TABLE.items()
                for hw, v in zip(COLUMNS, vals, strict=True) if v is not None}
    assert set(rows) == set(expected) and len(rows) == 22
    for key, f in rows.items():
        isl, osl, hw = key
        assert f.value == expected[key] and f.metric == "throughput_per_chip"
        assert f.chips == 1 and f.precision == "mxfp4" and f.scenario == "serving"
        # the GPT-OSS llm_options: fp8 KV on Blackwell, the model's bf16 ("auto") on Hopper
        assert f.kv_precision == ("fp8" if hw in ("b200", "gb200-nvl72") else None)
        # trtllm-bench's defaults for a quantization it does not tune, chunked prefill off
        assert f.max_batch == 2048
        assert f.max_batched_tokens == max(8192, isl + 2048)
        # the page's Number of Requests (1000/1000 has none: its 1024/1024 line's, assumed)
        assert f.batch == f.requests == REQUESTS[(isl, osl)]
        # thousands of sequences of an MoE model: scored, not fitted
        assert scored_only_reason(f, CAT).startswith("moe-offline")


def test_the_gpt_oss_120b_rows_take_the_same_max_batch_per_rank():
    _, figs = load_published()
    rows = [f for f in figs if f.source == V12 and f.model == "gpt-oss-120b"]
    assert len(rows) == 9
    for f in rows:
        ranks = f.expert_parallel if f.attention_dp else 1
        assert f.max_batch == 2048 * ranks, f.id
