"""The harness of a figure: what stood between the engine and the clock that measured it.

A time to the first token is the engine's steps plus what the request crosses besides them,
and that depends on how the source ran the engine, not on the engine alone:

- ``static``: a static batch in the engine's own benchmark (TensorRT-LLM's
  gptSessionBenchmark, vLLM's ``benchmark_latency``, LMDeploy's ``profile_generation``): the
  prompts are token ids handed to the runtime in process; the first token costs the steps and
  the runtime's own host work (scheduling the context phase, sampling, one token copied back);
- ``offline``: every request queued in process at once (``trtllm-bench``, vLLM's offline
  throughput benchmark): the same in-process path, no API server;
- ``server``: a closed loop against an HTTP API server (InferenceMAX's and ATOM's
  ``benchmark_serving``, NVIDIA's AIPerf / genai-perf against NIM): besides the runtime's work,
  the request is parsed and tokenized by the API server, handed to the engine process, and its
  first token detokenized and streamed back to the client.

An engine profile has a term for each part: ``request_overhead_ms`` (the runtime's, every
harness) and ``serving_overhead_ms`` (its API server's, a ``server`` harness only;
docs/calibration.md, "The fit"). A figure's harness is a condition the source states: a
figure may name it (``harness``); otherwise it follows from the scenario (a static batch) and
the conditions the source gives (an offline run, or ``trtllm-bench``, else an API server).
"""

from __future__ import annotations

from fastmode.backends.calibrate.figure import Figure

HARNESSES = ("static", "offline", "server")
# words of a serving figure's engine or conditions that say it ran in process (no API server)
OFFLINE_MARKS = ("offline", "trtllm-bench")


def harness_of(fig: Figure) -> str:
    """``fig``'s harness: its ``harness`` field if stated, else from its conditions."""
    if fig.harness:
        return fig.harness
    if fig.scenario == "static":
        return "static"
    text = f"{fig.engine} {fig.conditions}".lower()
    return "offline" if any(m in text for m in OFFLINE_MARKS) else "server"


def through_server(fig: Figure) -> bool:
    """True if ``fig``'s requests went through an API server (its serving term applies)."""
    return harness_of(fig) == "server"


__all__ = ["HARNESSES", "OFFLINE_MARKS", "harness_of", "through_server"]
