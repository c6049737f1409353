"""The fitted parameters: their ranges and widths, which stage fits them, and the hand-set
priors every fit starts from and is pulled towards (kept here, not read back from
hardware.toml, so that a refit is reproducible)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """A fitted field of HardwareProfile: its range and how it is searched.

    The search runs over log(value + offset) (``offset`` > 0 lets a field reach 0);
    ``sigma`` is the width of the pull towards the prior in that coordinate.
    """

    name: str
    lo: float
    hi: float
    sigma: float
    offset: float = 0.0

    def to_x(self, v: float) -> float:
        return math.log(max(v, self.lo) + self.offset)

    def from_x(self, x: float) -> float:
        return min(self.hi, max(self.lo, math.exp(x) - self.offset))


PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("mbu", 0.3, 0.92, 0.25),
    Param("mbu_kv", 0.15, 0.92, 0.4),
    Param("mfu", 0.15, 0.95, 0.25),
    Param("mfu_fp8", 0.1, 0.95, 0.3),
    Param("step_overhead_ms", 0.02, 15.0, 1.0),
    Param("layer_latency_us", 0.5, 80.0, 0.7),
    Param("interconnect_latency_us", 0.5, 100.0, 0.7),
    # the collectives' bus bandwidth as a share of the link's line rate: one sigma spans
    # ~0.67-1.0, the busbw NCCL's all-reduce reaches on 8 x H100 at decode-step sizes (ring,
    # NVLS) in the sources cited at NVLINK_BUS_SHARE
    Param("allreduce_bus_share", 0.3, 1.1, 0.2),
    Param("gemm_min_tokens", 1.0, 1024.0, 1.0),
    Param("roofline_overlap", 0.0, 1.0, 1.0, offset=0.1),
    Param("request_overhead_ms", 0.0, 200.0, 1.5, offset=2.0),
    Param("mfu_fp4", 0.1, 0.95, 0.3),
    Param("gemm_half_tokens", 0.0, 4096.0, 1.5, offset=8.0),
    Param("attention_half_tokens", 0.0, 16384.0, 1.5, offset=32.0),
    Param("expert_read_efficiency", 0.3, 1.0, 0.3),
    Param("expert_compute_efficiency", 0.1, 1.0, 0.5),
    Param("moe_layer_latency_us", 0.0, 400.0, 2.0, offset=1.0),
    Param("mla_layer_latency_us", 0.0, 400.0, 2.0, offset=1.0),
    Param("w4a16_efficiency", 0.05, 0.95, 0.4),
    # the router's spread of expert popularity (fastmode/backends/expert_skew.py), searched on
    # log(cv2 + 0.25): one sigma from the prior (0.3) spans cv2 0.03-1.0, routing Gini
    # 0.10-0.50, the band EXPERT_LOAD_CV2_PRIOR's source measured
    Param("expert_load_cv2", 0.0, 8.0, 0.8, offset=0.25),
    # the reference engine's, written into a GPU's profile beside its step overhead (not fitted
    # per hardware)
    Param("seq_overhead_us", 0.0, 50.0, 1.5, offset=1.0),
    Param("request_us_per_prompt_token", 0.0, 30.0, 1.0, offset=0.5),
)}
# An engine's terms (EngineProfile fields; fitted as "ENGINE/field"), searched the same way.
ENGINE_SPECS: dict[str, Param] = {p.name: p for p in (
    Param("request_overhead_ms", 0.0, 200.0, 1.5, offset=2.0),
    Param("step_overhead_ms", 0.02, 15.0, 1.0),
    Param("gqa_reread", 0.0, 1.0, 1.0, offset=0.1),
    Param("bandwidth_scale", 0.5, 1.5, 0.15),
    Param("compute_scale", 0.4, 2.0, 0.25),
    Param("seq_overhead_us", 0.0, 50.0, 1.5, offset=1.0),
    Param("serving_overhead_ms", 0.0, 200.0, 1.5, offset=2.0),
    Param("serving_us_per_token", 0.0, 30.0, 1.0, offset=0.5),
)}
# Kernel behaviour common to the GPU engines: fitted once over all GPU figures, then fixed.
# Skewed routing (expert_load_cv2, fastmode/backends/expert_skew.py) is measured but not in the shipped
# fit: a refit with it (in-sample 6.1% -> 5.4%) left the
# cross-validated median at 10.9% and took TTFT's from 11.9% to 12.2% (docs/calibration.md,
# docs/notes/calibration.md). True puts it in SHARED with its prior; every profile keeps
# uniform routing (0) otherwise.
ROUTING_SKEW_IN_FIT = False
SHARED = ("gemm_min_tokens", "roofline_overlap", "gemm_half_tokens", "attention_half_tokens",
          "expert_read_efficiency", "expert_compute_efficiency", "mla_layer_latency_us",
          "w4a16_efficiency") + (("expert_load_cv2",) if ROUTING_SKEW_IN_FIT else ())
# Efficiencies of one chip: fitted per hardware, pulled towards the pooled fit of all GPUs.
# (step_overhead_ms is an engine term for the public set, a hardware one for your own server.)
EFFICIENCIES = ("mbu", "mbu_kv", "mfu", "mfu_fp8", "mfu_fp4", "step_overhead_ms")
CHIP_EFFICIENCIES = ("mbu", "mbu_kv", "mfu", "mfu_fp8", "mfu_fp4")
# Properties of the chip and its interconnect: fitted per hardware, pulled to the hand prior.
CHIP = ("layer_latency_us", "interconnect_latency_us", "allreduce_bus_share")
FIT_PARAMS: tuple[str, ...] = EFFICIENCIES + CHIP + SHARED

# The hand-set estimates every fit starts from and is pulled towards: the values of
# fastmode/backends/data/hardware.toml before any fit (MBU/MFU inside the reference's published ranges,
# MBU 0.55-0.75 and MFU 0.35-0.65; overheads and latencies as documented there; the all-reduce
# latency is what its ring model gave for 8 chips, 2 x 7 x alpha). KV-read
# efficiency and fp8 GEMM efficiency start equal to mbu and mfu. Shared engine terms start at
# a 64-row GEMM tile, a plain max roofline (overlap 1) and 5 ms of request handling. Kept
# here (not read back from hardware.toml) so that a refit is reproducible.
# GEMM efficiency by size starts at half of the large-GEMM rate at 128 rows (a 128-row tile
# fills one wave of a Hopper / Blackwell GEMM), attention at half its rate at 1,024 tokens
# (FlashAttention-2/3 forward benchmarks rise from short to long sequences), expert reads at
# the dense weights' efficiency. The MLA layers' latency floor: kernels per layer x one
# kernel's floor, the same floor the dense prior implies (layer_latency_us 5-6 us for the ~8
# kernels of a GQA decode layer under CUDA graphs: ~0.7 us each; NVIDIA's "Getting Started
# with CUDA Graphs" blog: a graph removes all but ~0.5 us of a short kernel's launch cost).
# Absorbed MLA decode (DeepSeek-V2/V3 config: q_lora_rank, kv_lora_rank) runs 4 kernels a GQA
# layer does not: the fused q/kv down-projection, the two latent RMSNorms, the W_UK absorption
# BMM before attention and the W_UV BMM after it: 4 x 0.7 = ~3 us. (The fit of the set puts
# ~100 us there, from batch-1 DeepSeek alone: not a launch floor, what the model lacks at
# batch 1 -- docs/calibration.md.) An MoE FFN's extra kernels (router, top-k, permute,
# finalize) are not fitted (moe_layer_latency_us: the set cannot tell them from step overheads).
# A GEMM of 4-bit weights dequantised to bf16 on a chip without 4-bit tensor cores (W4A16,
# fastmode/backends/dequant.py) starts at 0.26 of the bf16 peak: an nsys capture of a W4A16 MoE GEMM
# at prefill sizes on H100, issue-bound on the dequantisation (sgl-project/sglang PR #38884).
W4A16_PRIOR = 0.26
# The router's spread of expert popularity (fastmode/backends/expert_skew.py) starts at cv2 = 0.3: a
# Gamma spread whose Gini coefficient is 0.30 (Gini = Gamma(a + 1/2) / (a Gamma(a) sqrt(pi))
# for shape a = 1 / cv2). Measured routing Gini of five MoE checkpoints on H100 (arXiv
# 2605.20982, "Diagnosing Overhead in Dispatch Operations"): 0.29-0.38 for MLA models on mock
# tokens (random token ids, as the benchmarks of the set send), MHA 0.105 on real text, GQA
# (Qwen3-30B) between; mock tokens read up to 2.35x the real-text Gini. 0.30 is the low end
# of the mock-token band; uniform routing (cv2 = 0, Gini 0) was the model before.
EXPERT_LOAD_CV2_PRIOR = 0.3
# NCCL's collectives on NVLink reach ~370 GB/s of NVLink 4's 450 GB/s line rate on 8 x H100:
# "With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s"
# (S. Jeaugey, NVIDIA, https://github.com/NVIDIA/nccl-tests/issues/212); the same library and protocols on every
# NVLink generation. At a decode step's sizes, torch.distributed's NCCL all-reduce on 8 x H100
# took 59 / 91 / 136 us at 4 / 8 / 16 MB (https://github.com/ByteDance-Seed/Triton-distributed/issues/57): a
# latency of ~45 us and a busbw of 290-325 GB/s from the slope, 0.64-0.72 of the line rate.
# AMD's Infinity Fabric (RCCL): no measurement read, the line rate as before.
NVLINK_BUS_SHARE = 370.0 / 450.0
_SHARED_PRIOR = {"gemm_min_tokens": 64.0, "roofline_overlap": 1.0, "request_overhead_ms": 5.0,
                 "gemm_half_tokens": 128.0, "attention_half_tokens": 1024.0,
                 "expert_read_efficiency": 1.0, "expert_compute_efficiency": 1.0,
                 "moe_layer_latency_us": 0.0,
                 "mla_layer_latency_us": 2.8, "w4a16_efficiency": W4A16_PRIOR,
                 **({"expert_load_cv2": EXPERT_LOAD_CV2_PRIOR} if ROUTING_SKEW_IN_FIT else {})}


def _gpu(mbu: float, mfu: float, layer_us: float, allreduce_us: float,
         step_ms: float = 1.0, bus_share: float = NVLINK_BUS_SHARE) -> dict[str, float]:
    return {"mbu": mbu, "mbu_kv": mbu, "mfu": mfu, "mfu_fp8": mfu, "mfu_fp4": mfu,
            "step_overhead_ms": step_ms, "layer_latency_us": layer_us,
            "interconnect_latency_us": allreduce_us, "allreduce_bus_share": bus_share,
            **_SHARED_PRIOR}


PRIORS: dict[str, dict[str, float]] = {
    "a100-40g": _gpu(0.65, 0.5, 8.0, 35.0),
    "a100-80g": _gpu(0.65, 0.5, 8.0, 35.0),
    "h100-sxm": _gpu(0.7, 0.5, 6.0, 28.0),
    "h200": _gpu(0.7, 0.5, 6.0, 28.0),
    "gh200": _gpu(0.7, 0.5, 6.0, 28.0),
    "b200": _gpu(0.65, 0.45, 5.0, 9.8),
    "b300": _gpu(0.65, 0.45, 5.0, 9.8),
    # NVL72 racks: the B200's chip, NVLink through the rack's switch trays
    "gb200-nvl72": _gpu(0.65, 0.45, 5.0, 11.0),
    "gb300-nvl72": _gpu(0.65, 0.45, 5.0, 11.0),
    # AMD Instinct: ROCm kernels (hipBLASLt, CK / AITER attention) reach less of their peaks
    # than CUDA's on Hopper (AMD's own MI300X tuning guides: "Best practices for competitive
    # inference optimization on AMD Instinct MI300X", ROCm blog); all-reduce over the
    # Infinity Fabric mesh ~30 us (RCCL / custom all-reduce); estimates
    "mi300x": _gpu(0.6, 0.45, 8.0, 30.0, 1.3, 1.0),
    "mi325x": _gpu(0.6, 0.45, 8.0, 30.0, 1.3, 1.0),
    "mi355x": _gpu(0.6, 0.4, 7.0, 25.0, 1.3, 1.0),
    # a wafer's dataflow has no kernels to launch: its per-layer pipeline latency is
    # layer_latency_us whatever the layer holds, and no GEMM ramps up by size
    "wse-3": {"mbu": 0.5, "mbu_kv": 0.5, "mfu": 0.3, "mfu_fp8": 0.3, "mfu_fp4": 0.3,
              "step_overhead_ms": 0.1, "layer_latency_us": 20.0,
              "interconnect_latency_us": 15.0, "allreduce_bus_share": 1.0,
              **{**_SHARED_PRIOR, "gemm_half_tokens": 0.0, "attention_half_tokens": 0.0,
                 "moe_layer_latency_us": 0.0, "mla_layer_latency_us": 0.0}},
}
# A GPU that no figure of a fit measured takes its chip values (CHIP_EFFICIENCIES and CHIP)
# from the first of these siblings that is measured, instead of the pooled GPU values: the
# same vendor's chip of the same or the next generation, run by the same software stack. The
# efficiencies are shares of each chip's own datasheet peaks (its bandwidth and FLOP/s rows
# stay its own), so they carry over unscaled between chips of one architecture (H100 / H200 /
# GH200: one Hopper die; B200 / B300 / GB200 / GB300: Blackwell; MI300X / MI325X: one CDNA 3
# die with different HBM, MI355X its CDNA 4 successor on the same ROCm kernels); the layer
# floor (kernel launches) and the all-reduce latency (the same NVLink / Infinity Fabric
# generation) likewise. A chip with no measured sibling gets the pooled values.
HW_SIBLINGS: dict[str, tuple[str, ...]] = {
    "a100-40g": ("a100-80g",),
    "a100-80g": ("a100-40g",),
    "h100-sxm": ("h200", "gh200"),
    "h200": ("h100-sxm", "gh200"),
    "gh200": ("h100-sxm", "h200"),
    "b200": ("gb200-nvl72", "b300", "gb300-nvl72"),
    "gb200-nvl72": ("b200", "gb300-nvl72", "b300"),
    "b300": ("b200", "gb300-nvl72", "gb200-nvl72"),
    "gb300-nvl72": ("gb200-nvl72", "b300", "b200"),
    "mi300x": ("mi325x", "mi355x"),
    "mi325x": ("mi300x", "mi355x"),
    "mi355x": ("mi325x", "mi300x"),
}
# The generic GPU estimate the pooled fit starts from (the reference's mid-range values).
GPU_PRIOR = {"mbu": 0.7, "mbu_kv": 0.7, "mfu": 0.5, "mfu_fp8": 0.5, "mfu_fp4": 0.5,
             "step_overhead_ms": 1.0, **_SHARED_PRIOR}
PRIOR_WEIGHT = 0.02  # a parameter one sigma from its prior costs as much as ~2 figures 10% off


__all__ = ["CHIP", "CHIP_EFFICIENCIES", "EFFICIENCIES", "ENGINE_SPECS", "EXPERT_LOAD_CV2_PRIOR",
           "FIT_PARAMS", "NVLINK_BUS_SHARE", "ROUTING_SKEW_IN_FIT",
           "GPU_PRIOR", "HW_SIBLINGS", "PARAMS", "PRIORS", "PRIOR_WEIGHT", "Param", "SHARED"]
