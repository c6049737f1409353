"""An API server's time per prompt token before the first token (tokenizing the prompt's text):
the engine term ``serving_us_per_token``, the profile's ``request_us_per_prompt_token``.

Modeled times only: the term adds exactly its microseconds per prompt token to a served
request's time to the first token, under every arrival model and harness, and nothing to an
in-process one; the fallbacks pass it where a server-timed TTFT measured it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from fastmode.backends.calibrate import Figure
from fastmode.backends.calibrate.engines import EngineProfile
from fastmode.backends.calibrate.lineage import informed_terms
from fastmode.backends.perf import Placement
from fastmode.backends.perf_modes import open_loop
from fastmode.backends.perf_serving import serving_steady_state, static_batch
from fastmode.backends.profiles import Catalog

CAT = Catalog.builtin()
H100 = CAT.get_hardware("h100-sxm")
LLAMA = CAT.get_model("llama-3.1-8b")


def _placement(us: float) -> Placement:
    return Placement(LLAMA, replace(H100, request_overhead_ms=5.0,
                                    request_us_per_prompt_token=us), 1, "bf16")


@pytest.mark.parametrize("prompt", [1000, 8000])
def test_a_served_first_token_pays_the_tokenizing_of_its_prompt(prompt: int) -> None:
    bare, tok = _placement(0.0), _placement(3.0)
    extra = 3e-6 * prompt
    for arrivals in ("lockstep", "spread"):
        a = serving_steady_state(bare, 8, prompt, 200, arrivals=arrivals, request_overhead=True)
        b = serving_steady_state(tok, 8, prompt, 200, arrivals=arrivals, request_overhead=True)
        assert b.ttft_s - a.ttft_s == pytest.approx(extra, rel=0.02), arrivals
        # it is no engine step: the steps do not change (a longer cycle only spaces the
        # prompts a little more: the tokens' pace within 1%)
        assert b.decode_step_s == a.decode_step_s
        assert b.itl_s == pytest.approx(a.itl_s, rel=0.01)
    a = static_batch(bare, 4, prompt, 100, request_overhead=True)
    b = static_batch(tok, 4, prompt, 100, request_overhead=True)
    assert b.ttft_s - a.ttft_s == pytest.approx(extra)
    a = open_loop(bare, 1.0, prompt, 100, request_overhead=True)
    b = open_loop(tok, 1.0, prompt, 100, request_overhead=True)
    assert b.ttft_s - a.ttft_s == pytest.approx(extra, rel=0.02)
    # without the request overhead asked for (fastmode's own scheduler), nothing
    assert serving_steady_state(tok, 8, prompt, 200).ttft_s == \
        serving_steady_state(bare, 8, prompt, 200).ttft_s


def test_the_engine_term_reaches_only_requests_through_its_server() -> None:
    e = EngineProfile("vllm", ("vLLM",), serving_us_per_token=2.5)
    assert e.hardware(H100, server=True).request_us_per_prompt_token == 2.5
    assert e.hardware(H100, server=False).request_us_per_prompt_token == 0.0


def _fig(i: int, engine: str, metric: str, harness: str = "") -> Figure:
    return Figure(id=f"f{i}", source="s", model="llama-3.1-8b", hardware="h100-sxm", chips=1,
                  precision="bf16", scenario="serving", batch=4, prompt_tokens=500,
                  output_tokens=200, metric=metric, value=1.0, unit="s", engine=engine,
                  harness=harness)


def test_a_server_timed_ttft_informs_and_passes_the_term_an_offline_one_does_not() -> None:
    engines = {"vllm": EngineProfile("vllm", ("vLLM",)),
               "trtllm": EngineProfile("trtllm", ("TensorRT-LLM",))}
    informs, passes = informed_terms(
        [_fig(0, "vLLM 0.11", "ttft"), _fig(1, "TensorRT-LLM 1.0", "ttft", "offline")], engines)
    assert "serving_us_per_token" in informs["vllm"] and "serving_us_per_token" in passes["vllm"]
    assert "serving_us_per_token" not in informs["trtllm"]
    assert "serving_us_per_token" not in passes["trtllm"]
