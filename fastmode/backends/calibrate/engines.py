"""Serving engines: the software terms of a measurement, apart from the chip it ran on.

A published figure was measured on an engine (TensorRT-LLM v0.6.1, NIM 1.8, vLLM 0.11.2,
LMDeploy TurboMind...). What the engine does, not the chip, sets some terms of the model:

- ``request_overhead_ms``: the runtime's time to the first token besides the engine steps
  (scheduling the context phase, sampling, the token copied back), whatever the harness;
- ``serving_overhead_ms``: what its API server adds before the first token (parsing and
  tokenizing the request, the hop to the engine process, detokenizing and streaming the first
  token to the client): only figures measured through a server see it (``harness.py``);
- ``step_overhead_ms``: host work per step (scheduler, launches not captured in a graph);
- memory (not fitted; each engine's rule, fastmode/backends/memory.py): ``kv_memory`` "total" (vLLM:
  ``memory_fraction`` of the chip minus weights, activations at the step budget and
  ``reserved_gb``), "free" (TensorRT-LLM: ``memory_fraction`` of what is left after them) or
  "static" (SGLang: ``memory_fraction`` of the chip for weights and KV);
- ``gqa_reread``: how much of a GQA group's KV a decode-attention kernel reads again for each
  query head (0: once per group, FlashAttention / FlashInfer / XQA; 1: once per query head,
  TensorRT-LLM's masked-MHA kernel before XQA). The placement reads
  ``1 + gqa_reread * (heads / kv_heads - 1)`` bytes per byte of KV it attends to.

An engine profile (``fastmode/backends/data/engines.toml``) names the engine strings it covers
(``match``: prefixes of a figure's ``engine``) and is fitted to every source of that engine
(docs/calibration.md). A figure whose engine matches no profile (a user's own measurements:
``engine = "measured"``) uses the hardware profile's own ``request_overhead_ms`` and
``step_overhead_ms``, which are the reference engine's (``REFERENCE_ENGINE``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

from fastmode.backends.profiles import HardwareProfile, ModelProfile

ENGINE_PARAMS = ("request_overhead_ms", "step_overhead_ms", "gqa_reread", "bandwidth_scale",
                 "compute_scale", "seq_overhead_us", "serving_overhead_ms",
                 "serving_us_per_token")
REFERENCE_ENGINE = "vllm"  # the engine whose terms the hardware profiles carry (fastmode serve)


@dataclass(frozen=True)
class EngineProfile:
    name: str
    match: tuple[str, ...]  # prefixes of Figure.engine this profile covers
    request_overhead_ms: float = 5.0
    step_overhead_ms: float = 1.0
    gqa_reread: float = 0.0
    bandwidth_scale: float = 1.0  # its kernels' share of the chip's bandwidth, vs the pooled fit
    compute_scale: float = 1.0  # its GEMM and attention kernels' share of the FLOP/s, likewise
    seq_overhead_us: float = 2.0  # host work per sequence of a step
    # host work per sequence hidden under the GPU's step by an overlap scheduler, by the
    # hardware (its system's CPU) it was measured on; not fitted (engines.toml: its source)
    hidden_seq_us: Mapping[str, float] = field(default_factory=dict)
    # its API server's time to the first token, on top of request_overhead_ms (a figure
    # measured through a server, harness.py); 0: a profile that does not split them
    serving_overhead_ms: float = 0.0
    # and per prompt token (tokenizing the prompt's text), likewise through a server only
    serving_us_per_token: float = 0.0
    # memory accounting (not fitted): its rule, its default share, its own reserve per chip
    kv_memory: str = "total"
    memory_fraction: float = 0.9
    reserved_gb: float = 1.92  # its own reserve on one chip (communication buffers: memory.py)
    # "paged": KV taken as replies grow (vLLM, SGLang); "reserved": the whole reply's at
    # admission (TensorRT-LLM's GUARANTEED_NO_EVICT): perf_serving.kv_per_sequence
    kv_admission: str = "paged"
    description: str = ""
    sources: tuple[str, ...] = field(default=())  # documentation: where its terms come from

    def values(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in ENGINE_PARAMS}

    def with_values(self, values: Mapping[str, float]) -> EngineProfile:
        changes: dict[str, Any] = {k: float(v) for k, v in values.items() if k in ENGINE_PARAMS}
        return replace(self, **changes)

    def covers(self, engine: str) -> bool:
        return any(engine.startswith(m) for m in self.match)

    def hardware(self, hw: HardwareProfile, server: bool = True) -> HardwareProfile:
        """``hw`` with this engine's software terms in place of the profile's own and its
        kernels' efficiencies (the profile's scaled, at most 1). ``server``: requests reach it
        through its API server (its serving term is in the time to the first token), as a
        user's do; False for an in-process harness (a static or offline benchmark)."""
        bw, fl = self.bandwidth_scale, self.compute_scale
        return replace(
            hw, request_overhead_ms=self.first_token_overhead_ms(server),
            request_us_per_prompt_token=self.serving_us_per_token if server else 0.0,
            step_overhead_ms=self.step_overhead_ms, seq_overhead_us=self.seq_overhead_us,
            hidden_seq_us=self.hidden_seq_us.get(hw.name, 0.0),
            mbu=min(1.0, hw.mbu * bw),
            mbu_kv=min(1.0, hw.kv_bandwidth_efficiency * bw), mfu=min(1.0, hw.mfu * fl),
            mfu_fp8=min(1.0, hw.gemm_efficiency("fp8") * fl),
            mfu_fp4=None if hw.mfu_fp4 is None else min(1.0, hw.mfu_fp4 * fl),
        )

    def first_token_overhead_ms(self, server: bool = True) -> float:
        """The time to the first token besides the steps: the runtime's, and its API
        server's when the request went through one."""
        return self.request_overhead_ms + (self.serving_overhead_ms if server else 0.0)

    def memory(self, fraction: float | None, budget: int) -> dict[str, Any]:
        """Placement memory arguments of this engine at its share ``fraction`` (None: its
        default) and a step budget of ``budget`` tokens (its activations)."""
        share = self.memory_fraction if fraction is None else fraction
        paged = self.kv_admission == "paged"
        if self.kv_memory == "static":
            return {"memory_utilization": share, "kv_paged": paged}
        args: dict[str, Any] = {"activation_tokens": budget, "reserved_gb": self.reserved_gb,
                                "kv_paged": paged}
        if self.kv_memory == "free":
            return {**args, "memory_utilization": 1.0, "kv_memory_fraction": share}
        return {**args, "memory_utilization": share}

    def kv_read_factor(self, model: ModelProfile) -> float:
        group = model.heads / model.kv_heads if model.kv_heads else 1.0
        return 1.0 + self.gqa_reread * max(0.0, group - 1.0)


Engines = Mapping[str, EngineProfile]


def engines_from_toml(text: str) -> dict[str, EngineProfile]:
    data: dict[str, Any] = tomllib.loads(text).get("engines", {})
    out: dict[str, EngineProfile] = {}
    for name, raw in data.items():
        raw = dict(raw)
        raw["match"] = tuple(raw.get("match", ()))
        raw["sources"] = tuple(raw.get("sources", ()))
        if raw.get("kv_memory", "total") not in KV_MEMORY_RULES:
            raise ValueError(f"engines.{name}.kv_memory: one of {', '.join(KV_MEMORY_RULES)}")
        if raw.get("kv_admission", "paged") not in KV_ADMISSION:
            raise ValueError(f"engines.{name}.kv_admission: one of {', '.join(KV_ADMISSION)}")
        out[name] = EngineProfile(name=name, **raw)
    return out


def load_engines() -> dict[str, EngineProfile]:
    """The engine profiles shipped in fastmode/backends/data/engines.toml (fitted values)."""
    text = resources.files("fastmode.backends.data").joinpath("engines.toml").read_text("utf-8")
    return engines_from_toml(text)


# The engines' starting points (the values of fastmode/backends/data/engines.toml before any fit, with
# their sources there): 1 ms of host work per step, and a GQA group's KV read once, except
# TensorRT-LLM before its XQA kernel (read once per query head). Before the first token: the
# runtime's own work is one step's host work (it schedules the context phase, samples, copies
# the token back: 1 ms, as step_overhead_ms); an API server adds 5 ms (parsing and tokenizing
# the request, the hop to the engine process, detokenizing and streaming the first token: the
# prior the whole request overhead had before the harness was a condition of a figure), and
# 2 us per prompt token to tokenize the prompt's text (an estimate: a Hugging Face fast
# tokenizer's encode in a server's log, https://github.com/tenstorrent/tt-inference-server/issues/2173, 131
# tokens in 1.3-2.8 ms with its per-call cost; vLLM's and ATOM's API servers tokenize in
# their Python process before handing token ids to the engine).
_ENGINE_PRIOR = {"request_overhead_ms": 1.0, "step_overhead_ms": 1.0, "gqa_reread": 0.0,
                 "bandwidth_scale": 1.0, "compute_scale": 1.0, "seq_overhead_us": 2.0,
                 "serving_overhead_ms": 5.0, "serving_us_per_token": 2.0}
ENGINE_PRIORS: dict[str, dict[str, float]] = {
    "trtllm-pre-xqa": {**_ENGINE_PRIOR, "gqa_reread": 1.0},
    "trtllm-xqa": dict(_ENGINE_PRIOR),
    "trtllm-cpp": dict(_ENGINE_PRIOR),
    "trtllm": dict(_ENGINE_PRIOR),
    "vllm-rocm": dict(_ENGINE_PRIOR),
    "vllm": dict(_ENGINE_PRIOR),
    "lmdeploy": dict(_ENGINE_PRIOR),
    "sglang": dict(_ENGINE_PRIOR),
    "atom": dict(_ENGINE_PRIOR),
    "atom-2026": dict(_ENGINE_PRIOR),
}
KV_MEMORY_RULES = ("total", "free", "static")
KV_ADMISSION = ("paged", "reserved")
# Each engine's relatives, nearest first: an engine that no figure of a fit was measured on
# takes, term by term, the fitted value of the first relative whose figures inform that term
# (``inherit_engines``), instead of its hand prior. The lineage is the code's, not a fit's:
# - TensorRT-LLM: one C++ runtime, v0.5/0.6 (trtllm-pre-xqa) -> v0.7/0.8 with XQA (trtllm-xqa)
#   -> v0.9+ and NIM (trtllm-cpp), whose kernels (XQA, the cutlass / trtllm-gen GEMMs, the
#   all-reduce plugins) the PyTorch backend (trtllm, v0.19+) calls: each generation's nearest
#   relatives are the ones next to it (the XQA blog; the perf overview measures both runtimes on
#   one page); the masked-MHA GQA reads (gqa_reread) stay pre-XQA's own;
# - vllm-rocm -> vllm: AMD's ROCm builds of the same vLLM scheduler and API server; and
#   vllm -> vllm-rocm, then ATOM: vLLM's design in other builds (ATOM: "a lightweight
#   vLLM-like implementation", its scheduler and OpenAI-compatible Python server modelled on
#   vLLM's, benchmarked with vLLM's benchmark_serving client) -- only what vLLM's own
#   figures do not inform comes from them (its API server's time, when no vLLM TTFT is measured
#   through a server);
# - atom <-> atom-2026 (two generations of AMD's ATOM: 0.1.1 on ROCm 7.1, late 2025, and the
#   ROCm 7.2 builds of 2026), then vllm-rocm: ATOM is "a lightweight vLLM-like implementation"
#   on the AITER kernels vLLM-ROCm also uses (ROCm/ATOM README);
# - sglang -> vllm: SGLang began on vLLM's model layers and shares FlashInfer's kernels.
# LMDeploy's TurboMind has no relative among them (its own C++ engine): its priors stand.
ENGINE_RELATIVES: dict[str, tuple[str, ...]] = {
    "trtllm-pre-xqa": ("trtllm-xqa", "trtllm-cpp", "trtllm"),
    "trtllm-xqa": ("trtllm-pre-xqa", "trtllm-cpp", "trtllm"),
    "trtllm-cpp": ("trtllm-xqa", "trtllm", "trtllm-pre-xqa"),
    "trtllm": ("trtllm-cpp", "trtllm-xqa", "trtllm-pre-xqa"),
    "vllm-rocm": ("vllm",),
    "vllm": ("vllm-rocm", "atom", "atom-2026"),
    "atom": ("atom-2026", "vllm-rocm", "vllm"),
    "atom-2026": ("atom", "vllm-rocm", "vllm"),
    "sglang": ("vllm",),
}
# Terms that are a kernel's property, never inherited (the prior says what the kernel does)
OWN_TERMS = ("gqa_reread",)


def engine_priors(engines: Engines) -> dict[str, EngineProfile]:
    """The engines reset to their priors (ENGINE_PRIORS; the profile's own values otherwise)."""
    return {n: e.with_values(ENGINE_PRIORS.get(n, e.values())) for n, e in engines.items()}


def ancestors(name: str) -> list[str]:
    """``name``'s relatives (``ENGINE_RELATIVES``), nearest first."""
    return list(ENGINE_RELATIVES.get(name, ()))


def inherit_engines(
    engines: Mapping[str, EngineProfile], informs: Mapping[str, frozenset[str]],
    passes: Mapping[str, frozenset[str]],
) -> dict[str, EngineProfile]:
    """Engines with the terms no figure informed filled from their nearest ancestor's.

    ``informs[engine]`` names the terms the fit's figures of that engine inform (empty or
    absent: no figure of it), ``passes[engine]`` those it may pass on (a subset: what its
    figures tell apart from their conditions). An engine keeps every term its own figures
    inform; each other term comes from the nearest ancestor that passes it, else it keeps its
    prior. So a cross-validation fold holding out an engine's only source sees its lineage's
    fitted terms, not a hand prior.
    """
    out = dict(engines)
    for name, e in engines.items():
        mine = informs.get(name, frozenset())
        values: dict[str, float] = {}
        for term in ENGINE_PARAMS:
            if term in OWN_TERMS or term in mine:
                continue  # a kernel's own property, or measured: its own fit
            for anc in ancestors(name):
                if anc in engines and term in passes.get(anc, frozenset()):
                    values[term] = getattr(engines[anc], term)
                    break
        if values:
            out[name] = e.with_values(values)
    return out


def engine_for(engine: str, engines: Engines | None) -> EngineProfile | None:
    """The profile covering a figure's ``engine`` string, or None (the hardware's terms)."""
    for e in (engines or {}).values():
        if e.covers(engine):
            return e
    return None


__all__ = [
    "ENGINE_PARAMS",
    "ENGINE_RELATIVES",
    "ENGINE_PRIORS",
    "KV_MEMORY_RULES",
    "OWN_TERMS",
    "REFERENCE_ENGINE",
    "EngineProfile",
    "Engines",
    "engine_for",
    "ancestors",
    "engine_priors",
    "engines_from_toml",
    "inherit_engines",
    "load_engines",
]
