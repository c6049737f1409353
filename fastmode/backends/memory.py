"""Memory the way serving engines account it: weights per chip, activations, the engine's own
reserve, and what is left for the KV cache. Pure functions over plain numbers.

An engine does not give the KV cache "memory minus weights":

- **vLLM** (``gpu_memory_utilization``, default 0.9): of each GPU's memory, that share minus
  the weights, minus the peak activations of a profiling forward pass at the step's token
  budget (``max_num_batched_tokens``), minus non-torch memory (NCCL and cuBLAS workspaces) is
  the KV cache (vllm/v1/worker/gpu_worker.py ``determine_available_memory``: ``requested_memory
  - profile_result.non_kv_cache_memory``, the non-KV part being weights + ``torch_peak_increase``
  + ``non_torch_increase`` of ``profile_run``). Its CUDA graphs are captured afterwards
  (``compile_or_warm_up_model`` after ``initialize_from_config``), from the memory beyond that
  share: they take nothing from the KV cache unless ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``
  (default 0) has the profile count them, then as ``cuda_graph_gb`` per GPU here (the start-up
  log's "GiB for CUDAGraph memory"). ``kv_cache_memory_bytes`` (``--kv-cache-memory-bytes``)
  gives the KV cache outright and skips the rule (``kv_memory_given``);
- **TensorRT-LLM** (``kv_cache_free_gpu_mem_fraction``, default 0.9): that share of the memory
  still free after the weights and the runtime's activation and workspace buffers;
- **SGLang** (``mem_fraction_static``): that share of the memory for weights and KV together.

Every engine starts from the memory CUDA reports (``chip_bytes``: the datasheet's gigabytes
are binary ones). Activations are estimated from the shape (``activation_bytes_per_chip``).
What the engine keeps besides weights, activations and KV (``reserve_bytes_per_chip``) is,
per chip, its own reserve (``reserved_gb`` in fastmode/backends/data/engines.toml: the CUDA context,
cuBLAS workspaces; 1.79 GiB in vLLM's profiling log of Llama-3-8B on one H100) plus, when the
replica spans chips, the collective-communication buffers (``COMM_RESERVE_GB``: NCCL's and the
custom all-reduce's, the same libraries under every engine; the same log at TP 2 reports 3.58
GiB of non-torch memory, 1.79 more). The KV cache per token of one replica is the model's bytes per
token times its **replication**: tensor parallelism splits the KV heads over the chips, but
with fewer KV heads than chips each head is stored on several (MLA's single latent on every
chip: 8 copies at TP 8, why DeepSeek-V3 is served with attention data parallelism, where each
chip keeps only its own sequences' KV).
"""

from __future__ import annotations

from fastmode.backends.profiles import ModelProfile, bytes_per_param

LOGIT_ROWS = 256  # sequences sampled at once in the profiling pass (vLLM's max_num_seqs)
GIB = float(1 << 30)
# Share of a GPU's memory CUDA reports (cudaMemGetInfo's total) of its datasheet figure read in
# GiB: an "80 GB" H100 is 80 GiB of HBM3 of which CUDA reports 79.19 GiB; an H200's 141 GB,
# 140.4 GiB (143,771 MiB); a B200's 180 GB, 179.1 GiB (183,359 MiB); a GB200's 186 GB, 185.0
# GiB (189,471 MiB); a GH200's 96 GB, 95.6 GiB (97,871 MiB): 0.99-0.998 of the figure.
VISIBLE_SHARE = 0.99


# Collective-communication buffers per chip of a replica spread over several chips (NCCL's
# channels and the engines' custom all-reduce workspaces): vLLM's memory profiling log
# (vllm-project/vllm PR #10511, Llama-3-8B on H100) reports non-torch memory of 1.79 GiB at
# TP 1 and 3.58 GiB at TP 2, the same activation peak (1.26 GiB) and weights halved: the
# difference, 1.79 GiB, is what joining a tensor-parallel group costs each GPU.
COMM_RESERVE_GB = 1.79 * (1 << 30) / 1e9


def reserve_bytes_per_chip(reserved_gb: float, chips: int) -> float:
    """What an engine keeps per chip besides weights, activations and KV: its own reserve
    and, on a replica of more than one chip, the communication buffers. An engine without
    a reserve (``reserved_gb`` 0: SGLang's static share, or no engine at all) is not charged
    either: its rule already leaves that memory out of the KV cache."""
    if reserved_gb <= 0:
        return 0.0
    return (reserved_gb + (COMM_RESERVE_GB if chips > 1 else 0.0)) * 1e9


def chip_bytes(memory_gb: float) -> float:
    """The memory an engine sizes its KV cache from, in bytes: what CUDA reports as the GPU's
    total (``torch.cuda.mem_get_info``), which both vLLM (``gpu_memory_utilization`` times it)
    and TensorRT-LLM (``total_gpu_memory`` minus the profiled peak) start from. Datasheets
    quote binary gigabytes: read as 10^9 bytes, an 80 GB H100 would lose 5 GB of KV cache."""
    return memory_gb * GIB * VISIBLE_SHARE


def kv_replication(model: ModelProfile, attention_tp: int) -> float:
    """Copies of each KV head a replica stores: 1 when the attention's tensor-parallel
    degree divides the KV heads, ``tp / kv_heads`` when heads are replicated."""
    if attention_tp <= 1 or model.kv_heads <= 0:
        return 1.0
    return max(1.0, attention_tp / model.kv_heads)


def ffn_width(model: ModelProfile) -> float:
    """Mean FFN (or routed-expert) intermediate width a token runs through per layer,
    inferred from the parameter counts (3 matrices of d_model x width, SwiGLU)."""
    q, b, e = model.gemm_params_b("bf16")
    body_ffn = max(0.0, q + b - model.attention_params)
    return (body_ffn + e) * 1e9 / max(1, model.layers) / (3.0 * model.d_model)


def activation_bytes_per_chip(model: ModelProfile, tokens: int, tp: int,
                              attention_dp: bool = False) -> float:
    """Peak live activations of a forward pass over ``tokens`` tokens on one chip, bf16: the
    residual stream and its normed copy and attention output (4 x d_model, not split by
    tensor parallelism), the QKV projection and the gate/up/act FFN tensors (split), and
    fp32 logits of up to ``LOGIT_ROWS`` sampled rows over the whole vocabulary."""
    if tokens <= 0:
        return 0.0
    attn_tp = 1 if attention_dp else max(1, tp)
    qkv = (model.heads + 2 * model.kv_heads) * model.head_dim / attn_tp
    per_token = 2.0 * (4 * model.d_model + qkv + 3 * ffn_width(model) / max(1, tp))
    logits = min(tokens, LOGIT_ROWS) * model.vocab * 4.0
    return tokens * per_token + logits


def kv_memory_given(chip_bytes: float, taken: float, given: float) -> float:
    """KV memory of one chip when the engine is told it (vLLM's ``kv_cache_memory_bytes``:
    ``determine_available_memory`` returns it without profiling, ``gpu_memory_utilization``
    unused). Negative when it and what else is ``taken`` exceed the chip: the model does not
    fit (vLLM runs out of memory at start-up)."""
    if taken + given > chip_bytes:
        return chip_bytes - taken - given
    return given


def attention_weight_bytes(model: ModelProfile, precision: str) -> float:
    """Bytes of the attention projections at ``precision`` (16-bit when the checkpoint keeps
    them so): what every chip holds with attention data parallelism."""
    q, b, _ = model.gemm_params_b(precision)
    bpp = 2.0 if b >= model.attention_params * 0.999 else bytes_per_param(precision)
    return min(model.attention_params, q + b) * 1e9 * bpp


def kv_memory_per_chip(chip_bytes: float, taken: float, utilization: float,
                       free_fraction: float | None) -> float:
    """KV memory of one chip: vLLM's rule (``utilization`` of the chip minus what weights,
    activations and the reserve ``taken``) or, with ``free_fraction``, TensorRT-LLM's (that
    share of what is left). Negative: the model does not fit."""
    if free_fraction is None:
        return chip_bytes * utilization - taken
    free = min(chip_bytes * utilization, chip_bytes - taken)
    return free * free_fraction if free > 0 else free


__all__ = ["COMM_RESERVE_GB", "GIB", "LOGIT_ROWS", "VISIBLE_SHARE", "activation_bytes_per_chip",
           "attention_weight_bytes", "chip_bytes", "ffn_width", "kv_memory_given", "kv_memory_per_chip",
           "kv_replication", "reserve_bytes_per_chip"]
