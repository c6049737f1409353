"""A measured figure: the record of one published number and its conditions (loaded and
predicted in figures.py; its harness read in harness.py, which both import)."""

from __future__ import annotations

from dataclasses import dataclass

SCENARIOS = ("static", "serving")
METRICS = ("ttft", "itl", "e2e", "throughput", "throughput_per_chip", "user_tokens_per_s")
# unit -> factor to the model's unit (seconds for times, tokens/s for rates)
UNITS: dict[str, dict[str, float]] = {
    "ttft": {"s": 1.0, "ms": 1e-3},
    "itl": {"s": 1.0, "ms": 1e-3},
    "e2e": {"s": 1.0, "ms": 1e-3},
    "throughput": {"tok/s": 1.0},
    "throughput_per_chip": {"tok/s/GPU": 1.0, "tok/s/chip": 1.0},
    "user_tokens_per_s": {"tok/s/user": 1.0, "tok/s": 1.0},
}


class CalibrationError(ValueError):
    """A measurement file or figure is invalid; the message names the field."""


@dataclass(frozen=True)
class Figure:
    """One measured number and the conditions it was measured under."""

    id: str
    source: str
    model: str
    hardware: str
    chips: int
    precision: str
    scenario: str  # "static" | "serving"
    batch: int  # static batch, or concurrency of a closed-loop serving benchmark
    prompt_tokens: int
    output_tokens: int
    metric: str
    value: float
    unit: str
    kv_precision: str | None = None
    max_batch: int = 256
    max_batched_tokens: int | None = None  # None: whole prompts in one step (static), 8192
    # serving: lengths drawn uniformly from [length_ratio * L, L] (vLLM's random dataset with
    # --random-range-ratio); below 1 the users' requests are desynchronised (arrivals
    # "spread") and the model is given the mean lengths. 1: every request exactly L (lockstep).
    length_ratio: float = 1.0
    # serving: the engine schedules each step while the previous one runs (vLLM's
    # --async-scheduling): a new request joins one step later
    async_scheduling: bool = False
    # serving: the run's requests in all, when published (its throughput is total output
    # tokens / wall time: with lengths that vary, the ragged drain of the last requests is
    # included; fixed lengths finish in whole waves); None: the steady state
    requests: int | None = None
    # placement options (docs/performance-model.md, "Parallelism"): attention data parallel
    # (TensorRT-LLM enable_attention_dp, SGLang --enable-dp-attention), expert-parallel groups
    attention_dp: bool = False
    expert_parallel: int = 1
    # the engine's memory share (vLLM gpu_memory_utilization, TensorRT-LLM
    # kv_cache_free_gpu_mem_fraction, SGLang mem_fraction_static); None: the engine's default
    memory_fraction: float | None = None
    # speculative decoding: "mtp" (the model's own multi-token-prediction layer) or a draft
    # model of models.toml, drafting draft_tokens per step, each accepted with probability
    # acceptance (as published, or derived from a published acceptance length)
    speculative: str = ""
    draft_tokens: int = 0
    acceptance: float = 0.0
    # how the source ran the engine (calibrate/harness.py): "static", "offline" (in process,
    # no API server) or "server"; "" = from the scenario and the conditions
    harness: str = ""
    engine: str = ""
    where: str = ""
    url: str = ""
    conditions: str = ""

    @property
    def si_value(self) -> float:
        """The measured value in seconds or tokens/s."""
        return self.value * UNITS[self.metric][self.unit]


__all__ = ["CalibrationError", "Figure", "METRICS", "SCENARIOS", "UNITS"]
