"""The 1.2 perf overview's Qwen3 MoE rows keep an fp8 KV cache, and their stated
`trtllm-bench` heuristic (its request estimate R, max batch and step budget) is the one that
an fp8 KV cache gives (docs/calibration.md).

The page's Qwen3 `llm_options` set no `kv_cache_config`, so the KV cache is the checkpoint's
(`kv_cache_quant_algo` of its `hf_quant_config.json`, TensorRT-LLM's "auto"); NVIDIA's
ModelOpt exports of these models carry FP8 (the pass's sources). `trtllm-bench` sizes its
batch from the same KV bytes (`tuning.py`, `calc_engine_setting` / `finetune_setting`), so a
row whose KV precision changes must have its heuristic numbers recomputed: these tests fail
if the two disagree."""

from __future__ import annotations

import math
import re

import pytest

from fastmode.backends.calibrate import load_published
from fastmode.backends.calibrate.scope import scored_only_reason
from fastmode.backends.profiles import Catalog, bytes_per_param

CAT = Catalog.builtin()
V12 = "trtllm-perf-overview-v12"
# the conditions' spelled-out heuristic: "R = 2975, max_batch_size 3072: max(6144, 1024 +
# 3072) = 6144; x 4 ranks = 24576" (the ranks part only with attention data parallelism)
HEURISTIC = re.compile(
    r"R = (\d+), max_batch_size (\d+): max\((\d+), (\d+) \+ (\d+)\) = (\d+)"
    r"(?:; x (\d+) ranks = (\d+))?")
# trtllm-bench's bytes per weight (tuning.py BYTES_PER_ELEM: NVFP4 0.5, FP8 1)
WEIGHT_BYTES = {"fp4": 0.5, "fp8": 1.0}
KV_MEMORY_FRACTION = 0.90  # the conditions' kv_cache_free_gpu_mem_fraction (assumed)


def _rows():
    _, figs = load_published()
    return [f for f in figs if f.source == V12 and f.model.startswith("qwen3-")]


def _finetune(requests: float, isl: int, osl: int) -> tuple[int, int]:
    """max_batch_size and max_num_tokens from trtllm-bench's request estimate, by the rule of
    tensorrt_llm/bench/build/tuning.py finetune_setting (NVIDIA/TensorRT-LLM 04cba882): batch
    up to 4,096 rounded up to 32 / 128 / 256 (64 at least), tokens R x (1 + ISL/OSL) up to
    32,768 rounded up to 256 / 512 / 1,024 (2,048 at least)."""
    bs = min(requests, 4096)
    tokens = min(bs * (1 + isl / osl), 32768)
    return (max(64, _bucket(bs, ((256, 32), (1024, 128)), 256)),
            max(2048, _bucket(tokens, ((4096, 256), (8192, 512)), 1024)))


def _bucket(x: float, steps: tuple[tuple[int, int], ...], last: int) -> int:
    """``x`` rounded up to the step of the first bound it is under (``last`` past them all)."""
    step = next((s for bound, s in steps if x < bound), last)
    return step * math.ceil(x / step)


def _requests_estimate(f, kv_bytes_per_element: float) -> float:
    """trtllm-bench's R (tuning.py calc_engine_setting): what the weights leave of the GPUs'
    memory, times the KV memory fraction, over one request's KV at ISL + OSL tokens, with the
    KV heads counted at least once per tensor-parallel rank. The chip's datasheet memory is
    taken as GiB, as the GPU reports it (within 2% of the figure's memory)."""
    m, hw = CAT.get_model(f.model), CAT.get_hardware(f.hardware)
    free = f.chips * hw.memory_gb - m.total_params_b * 1e9 * WEIGHT_BYTES[f.precision] / 2**30
    kv_heads = max(f.chips, m.kv_heads)
    per_token = 2 * m.layers * kv_heads * m.head_dim * kv_bytes_per_element / 2**30
    return free * KV_MEMORY_FRACTION / (per_token * (f.prompt_tokens + f.output_tokens))


def _kv_element_bytes(f) -> float:
    """Bytes of one K or V element of the figure's cache, as the model resolves it."""
    m = CAT.get_model(f.model)
    return m.kv_bytes_per_token(f.precision, f.kv_precision) / (
        2 * m.layers * m.kv_heads * m.head_dim)


def test_the_ten_rows_and_their_checkpoints():
    rows = _rows()
    assert len(rows) == 10
    for f in rows:
        assert scored_only_reason(f, CAT).startswith("moe-offline"), f.id
        ckpt = {("qwen3-30b-a3b", "fp4"): "nvidia/Qwen3-30B-A3B-FP4",
                ("qwen3-235b-a22b", "fp4"): "nvidia/Qwen3-235B-A22B-FP4",
                ("qwen3-235b-a22b", "fp8"): "nvidia/Qwen3-235B-A22B-FP8"}[f.model, f.precision]
        assert ckpt in f.conditions, f.id


def test_their_kv_cache_is_one_byte():
    """fp8: explicit on the FP4 rows (a 4-bit checkpoint would otherwise get a 16-bit cache),
    the weights' byte on the FP8 rows."""
    for f in _rows():
        assert _kv_element_bytes(f) == bytes_per_param("fp8") == 1.0, f.id
        assert f.kv_precision == ("fp8" if f.precision == "fp4" else None), f.id
        assert "fp8" in f.conditions and "bf16" not in f.conditions, f.id


def stated_heuristic(f) -> tuple[int, int, int, int]:
    """The row's spelled-out heuristic, checked against its rule: (R, max_batch_size, step
    budget per rank, attention-DP ranks)."""
    m = HEURISTIC.search(f.conditions)
    assert m, f.id
    r, bs, tokens, isl, bs_again, budget = (int(g) for g in m.groups()[:6])
    assert _finetune(r, f.prompt_tokens, f.output_tokens) == (bs, tokens), f.id
    # chunked prefill off: the budget holds a whole prompt beside the batch
    assert isl == f.prompt_tokens and bs_again == bs and budget == max(tokens, isl + bs), f.id
    return r, bs, budget, int(m.group(7)) if m.group(7) else 1


def test_the_stated_heuristic_follows_its_rule():
    for f in _rows():
        _, _, budget, ranks = stated_heuristic(f)
        assert ranks == (f.expert_parallel if f.attention_dp else 1), f.id
        assert f.max_batched_tokens == budget * ranks, f.id


def test_the_stated_estimate_is_the_one_byte_kv_estimate():
    """R in the conditions is trtllm-bench's estimate with the row's own KV bytes (1-byte K
    and V); with a bf16 cache it would be half, and the batch and step budget with it."""
    for f in _rows():
        m = HEURISTIC.search(f.conditions)
        assert m, f.id
        r = int(m.group(1))
        assert r == pytest.approx(_requests_estimate(f, _kv_element_bytes(f)), rel=0.03), f.id
        assert r > 1.8 * _requests_estimate(f, bytes_per_param("bf16")), f.id
