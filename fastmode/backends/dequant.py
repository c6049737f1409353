"""Dequantising GEMMs: 4-bit weights on a chip without 4-bit tensor cores (W4A16).

A chip with an fp4 row in its ``tflops`` (Blackwell, MI355X) runs MXFP4 / NVFP4 weights on
low-precision tensor cores (``HardwareProfile.rate_precision``). Elsewhere (Hopper, Ampere,
CDNA 3) the engines' 4-bit kernels (vLLM's Triton ``matmul_ogs`` and Marlin MoE, SGLang's
Marlin, TensorRT-LLM's Triton MXFP4 path on Hopper) load the 4-bit weights, dequantise each
tile to bf16 in the GEMM's main loop and run bf16 MMAs. The dequantisation (unpack, scale,
convert) costs several instructions per weight element and per row tile; at many rows the
kernel is issue-bound on it, not on the tensor cores: an ``nsys`` capture of a W4A16 Marlin
MoE at 16,384-token prefill chunks on H100 ran at 254 TFLOP/s, 25.7% of the bf16 peak, with 64
of every 220 instructions of its inner loop on MMAs (sgl-project/sglang PR #38884, Sep 2026;
H20's sweep in PR #34682: Marlin 2.0x slower than an MXFP4 x FP8 grouped GEMM from 8K rows
up). At few rows the same kernel is bound by reading its 4-bit weights (Marlin's design:
near-ideal 4x speed-up over fp16 up to batch 16-32).

So the GEMMs of such weights run at a flat share of the bf16 peak, ``w4a16_efficiency``
(``HardwareProfile``; prior 0.26, the capture above), at every size: the cost is per weight
element and row, not a tile left unfilled, so the size ramp of a tensor-core GEMM
(``gemm_half_tokens``) does not apply; under the roofline's max the weight read binds at a
decode batch and the dequantising loop at a prefill chunk. A chip with 4-bit tensor cores
never takes this path.
"""

from __future__ import annotations

from fastmode.backends.profiles import FOUR_BIT, HardwareProfile, canonical_precision


def dequantises(hw: HardwareProfile, precision: str) -> bool:
    """True if GEMMs of ``precision`` weights on ``hw`` dequantise them to bf16 in the kernel:
    4-bit weights on a chip with no fp4 tensor-core row."""
    return canonical_precision(precision) in FOUR_BIT and "fp4" not in hw.tflops


def w4a16_flops(hw: HardwareProfile) -> float:
    """FLOP/s one chip reaches in a dequantising 4-bit GEMM, at any number of rows."""
    return hw.tflops["bf16"] * 1e12 * hw.w4a16_efficiency


__all__ = ["dequantises", "w4a16_flops"]
