"""Memory as the serving engines account it (fastmode/backends/memory.py): what CUDA reports as the
GPU's memory, the weights, the activations of a profiling pass, the engine's reserve and the
communication buffers of a tensor-parallel group, and the KV cache that is left."""

from __future__ import annotations

import dataclasses

import pytest

from fastmode.backends.calibrate import load_published
from fastmode.backends.calibrate.figures import placement
from fastmode.backends.memory import (
    COMM_RESERVE_GB,
    GIB,
    activation_bytes_per_chip,
    chip_bytes,
    reserve_bytes_per_chip,
)
from fastmode.backends.perf import Placement
from fastmode.backends.profiles import Catalog, ProfileError

CAT = Catalog.builtin()

# vLLM's memory profiling log (vllm-project/vllm PR #10511), `vllm serve meta-llama/
# Meta-Llama-3-8B` on one H100 and with `-tp 2`: total_gpu_memory 79.22 GiB, utilization 0.90
# (71.29 GiB usable), weights 14.96 / 7.48 GiB, non_torch_memory 1.79 / 3.58 GiB, activation
# peak 1.26 GiB; available_kv_cache_memory at TP 1: 53.29 GiB.
VLLM_LOG_TOTAL_GIB = 79.22
VLLM_LOG_KV_TP1_GIB = 53.29
VLLM_LOG = {1: (14.96, 1.79), 2: (7.48, 3.58)}  # tp: (weights, non-torch) GiB per GPU
VLLM_LOG_ACTIVATION_GIB = 1.26


def vllm_placement(tp: int) -> Placement:
    """Llama 3 8B (Llama 3.1 8B's shape) in bf16 on ``tp`` H100s as vLLM's shipped profile
    sizes it: 0.9 of the GPU, activations at its 8,192-token step budget, its reserve."""
    m, h = CAT.get_model("llama-3.1-8b"), CAT.get_hardware("h100-sxm")
    return Placement(m, h, tp, "bf16", 0.9, activation_tokens=8192, reserved_gb=1.92)


def test_the_capacity_is_what_cuda_reports_not_decimal_gigabytes():
    """An "80 GB" H100 is 80 GiB of HBM3 of which CUDA reports 79.22 GiB (the log); read as
    10^9 bytes it would lose ~5 GB of KV cache per GPU."""
    assert chip_bytes(80.0) / GIB == pytest.approx(VLLM_LOG_TOTAL_GIB, rel=0.002)


@pytest.mark.parametrize("tp", [1, 2])
def test_vllm_reserve_matches_its_profiling_log(tp: int):
    """Weights and non-torch memory per GPU as the log prints them at TP 1 and TP 2: joining a
    tensor-parallel group costs each GPU the communication buffers."""
    p = vllm_placement(tp)
    weights, non_torch = VLLM_LOG[tp]
    assert p.weight_bytes_per_chip / GIB == pytest.approx(weights, rel=0.01)
    assert reserve_bytes_per_chip(p.reserved_gb, tp) / GIB == pytest.approx(non_torch, rel=0.01)
    if tp == 1:  # at TP 2 the log's peak stays 1.26 GiB where the shape's halves its FFN
        # part (0.75 GiB): the sampler's buffers over the whole vocabulary, not split by
        # tensor parallelism, set vLLM's peak there (docs/calibration.md, "Memory")
        act = activation_bytes_per_chip(p.model, 8192, tp) / GIB
        assert act == pytest.approx(VLLM_LOG_ACTIVATION_GIB, rel=0.15)


def test_vllm_kv_cache_matches_its_profiling_log():
    """The log's worked example: 79.22 x 0.90 - 14.96 - 1.79 - 1.26 = 53.29 GiB of KV cache on
    one H100; the model's rule lands within 1% (its activations are estimated from the shape)."""
    p = vllm_placement(1)
    assert p.kv_memory_bytes / GIB == pytest.approx(VLLM_LOG_KV_TP1_GIB, rel=0.01)


def test_communication_buffers_only_on_a_replica_over_several_chips():
    """One GPU keeps the engine's own reserve; two keep the NCCL buffers on top; an engine
    without a reserve (SGLang's static share, or none) is charged neither."""
    assert reserve_bytes_per_chip(1.92, 1) == pytest.approx(1.92e9)
    assert reserve_bytes_per_chip(1.92, 8) == pytest.approx((1.92 + COMM_RESERVE_GB) * 1e9)
    assert reserve_bytes_per_chip(0.0, 8) == 0.0
    two = vllm_placement(2)
    act = activation_bytes_per_chip(two.model, 8192, 2)
    per_chip = 0.9 * 80 * GIB * 0.99 - two.weight_bytes_per_chip - act \
        - (1.92 + COMM_RESERVE_GB) * 1e9
    assert two.kv_memory_bytes == pytest.approx(2 * per_chip)
    assert two.kv_capacity_tokens == int(two.kv_memory_bytes // two.kv_bytes_per_token)


def test_tensorrt_llm_gives_the_kv_cache_a_share_of_what_the_profiled_peak_leaves():
    """TensorRT-LLM's PyTorch backend (tensorrt_llm/_torch/pyexecutor/_util.py
    cal_max_tokens): (total GPU memory - the profiled peak of torch and non-torch memory) x
    free_gpu_memory_fraction, per GPU, the total as CUDA reports it."""
    m, h = CAT.get_model("llama-3.1-70b"), CAT.get_hardware("h100-sxm")
    p = Placement(m, h, 2, "fp8", memory_utilization=1.0, kv_memory_fraction=0.9,
                  activation_tokens=8192, reserved_gb=1.92)
    peak = p.weight_bytes_per_chip + activation_bytes_per_chip(m, 8192, 2) \
        + (1.92 + COMM_RESERVE_GB) * 1e9
    assert p.kv_memory_bytes == pytest.approx(2 * 0.9 * (80 * GIB * 0.99 - peak))


def test_a_405b_reserves_more_activation_memory_than_a_70b_on_the_same_gpus():
    """The residual stream is not split by tensor parallelism: at the same step budget on 8 x
    H100 the 405B's profiling pass holds more per GPU than the 70B's."""
    big, small = CAT.get_model("llama-3.1-405b"), CAT.get_model("llama-3.1-70b")
    assert activation_bytes_per_chip(big, 8192, 8) > 1.5 * activation_bytes_per_chip(
        small, 8192, 8)


def test_nim_holds_the_sequences_its_plateau_shows():
    """NIM 1.8's Llama 3.3 70B FP8 on 2 x H100 (5,000 in / 500 out): ITL and throughput are
    flat from concurrency 100 to 250 (92.9 / 93.2 ms, 917 / 920 tok/s), ~86 sequences running
    by Little's law. In 10^9-byte gigabytes the rule held 79, and the queue at concurrency 100
    was modelled 56% too slow; the capacity CUDA reports with the NCCL buffers holds 80-92."""
    _, figures = load_published()
    fig = next(f for f in figures
               if f.id == "nim-llama33-70b/llama-3.1-70b/h100-sxmx2/serving-b100-5000-500/ttft")
    p = placement(fig, CAT)
    running = p.kv_capacity_tokens / (fig.prompt_tokens + fig.output_tokens)
    assert 80 <= running <= 92


def test_cuda_graphs_counted_against_the_kv_cache_take_their_memory_from_it():
    """vLLM captures its CUDA graphs after sizing the KV cache (none taken from it: the
    default, 0); counted by the profile (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1) they take
    their bytes per GPU out of it, at every tensor-parallel degree."""
    for tp in (1, 2):
        base = vllm_placement(tp)
        graphs = dataclasses.replace(base, cuda_graph_gb=0.5)
        assert base.kv_memory_bytes - graphs.kv_memory_bytes == pytest.approx(tp * 0.5e9)
        assert graphs.kv_capacity_tokens < base.kv_capacity_tokens


def test_a_kv_cache_given_outright_ignores_the_utilization():
    """vLLM's --kv-cache-memory-bytes: that much KV per GPU whatever gpu_memory_utilization
    says; more than the GPU holds beside the weights does not fit."""
    p = vllm_placement(1)
    given = dataclasses.replace(p, kv_cache_gb=20.0)
    assert given.kv_memory_bytes == pytest.approx(20e9)
    assert dataclasses.replace(given, memory_utilization=0.5).kv_memory_bytes == pytest.approx(20e9)
    with pytest.raises(ProfileError, match="does not fit"):
        dataclasses.replace(p, kv_cache_gb=80.0)


def test_the_engine_flag_sets_the_kv_cache_of_each_gpu():
    """``fastmode engine --kv-cache-memory-bytes N``: the engine's KV capacity is N bytes per
    GPU over the bytes a token takes; a bad value names the flag."""
    from fastmode.backends.engine import build
    from fastmode.cli import build_parser
    from fastmode.cli.engine import apply_flags
    from fastmode.gateway.config import ConfigError, load_config
    from fastmode.gateway.engine_config import engine_config

    def capacity(*flags: str) -> int:
        args, extra = build_parser().parse_known_args(
            ["engine", "--deployment", "oss", "-dp", "1", *flags])
        args.ignored = extra
        spec = build(engine_config(apply_flags(load_config(), args), "oss", 1).sim())
        return spec.deployments["oss"].placement.kv_capacity_tokens

    p = build(load_config().sim()).deployments["oss"].placement
    per_token = p.kv_bytes_per_token * p.kv_replication
    assert capacity("--kv-cache-memory-bytes", "4000000000") == int(4e9 // per_token)
    assert capacity("--kv-cache-memory", "8000000000") == int(8e9 // per_token)
    with pytest.raises(ConfigError, match="--kv-cache-memory-bytes"):
        capacity("--kv-cache-memory-bytes", "0")


def test_tensorrt_llm_reserves_whole_replies_and_vllm_pages():
    """The engines' KV admission (engines.toml ``kv_admission``): TensorRT-LLM's default
    capacity policy reserves prompt + output at admission, vLLM and SGLang take KV as replies
    grow; the placement of each figure carries its engine's."""
    from fastmode.backends.calibrate.engines import load_engines

    engines = load_engines()
    assert all(e.kv_admission == "reserved" for n, e in engines.items() if n.startswith("trtllm"))
    assert engines["vllm"].kv_admission == engines["sglang"].kv_admission == "paged"
    assert engines["trtllm"].memory(None, 8192)["kv_paged"] is False
    assert engines["vllm"].memory(None, 8192)["kv_paged"] is True
