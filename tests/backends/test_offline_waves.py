"""An offline run of fixed-length requests is waves of the batch, not a steady state
(``backends.perf_serving.waves_throughput``; docs/calibration.md, "Offline runs are waves").

``trtllm-bench throughput`` queues every request at once; with one prompt and one output length
the engine's batch starts together, finishes together, and the last wave holds what is left. An
MoE model with thousands of sequences in its KV cache runs a 3,000-request dataset in one or two
such waves, where the steady state (every step at the full batch, prompts spread over the cycle)
overstates its throughput; a dense model running a few hundred at a time does not notice. The
reference is the engine itself: the continuous-batching scheduler running the same queue in
virtual time (no clock, so the figures do not depend on the machine).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from fastmode.backends.background import Background
from fastmode.backends.calibrate import Figure, predict_figure
from fastmode.backends.calibrate.figures import is_offline_waves, placement, workload
from fastmode.backends.perf import Placement
from fastmode.backends.perf_serving import (
    batch_that_fits,
    serving_steady_state,
    static_batch,
    waves_throughput,
)
from fastmode.backends.profiles import Catalog, ProfileError
from fastmode.backends.scheduler import Limits, Scheduler, Sequence

CAT = Catalog.builtin()
PROMPT, OUTPUT, BUDGET = 1024, 1024, 8192


def moe() -> Placement:
    """Qwen3-30B-A3B in NVFP4 on one B200 with an fp8 KV cache: ~1,500 sequences of 2,048
    tokens fit (the perf overview's MoE regime)."""
    return Placement(CAT.get_model("qwen3-30b-a3b"), CAT.get_hardware("b200"), 1, "fp4",
                     kv_precision="fp8")


def dense() -> Placement:
    """Llama 3.1 70B in fp8 on one H200: a few hundred such sequences fit."""
    return Placement(CAT.get_model("llama-3.1-70b"), CAT.get_hardware("h200"), 1, "fp8",
                     kv_precision="fp8")


def scheduler_run(p: Placement, requests: int, batch: int) -> float:
    """Output tokens/s of the engine's own scheduler running ``requests`` queued at once (all
    output tokens over the time the last one finishes)."""
    s = Scheduler(p, Limits(max_batch=batch, max_batched_tokens=BUDGET, max_waiting=requests,
                            prefix_caching=False), Background())
    for i in range(requests):
        assert s.submit(Sequence(i, PROMPT, OUTPUT, 0.0))
    now = 0.0
    while True:
        if s.steady():
            result, _, _ = s.run_steady(now, math.inf)
        else:
            step = s.step(now)
            if step is None:
                break
            result = step
        now = result.end
    return requests * OUTPUT / now


def kv_batch(p: Placement) -> int:
    return batch_that_fits(p, 10**6, PROMPT + OUTPUT, 10**6)


def steady(p: Placement, batch: int) -> float:
    return serving_steady_state(p, batch, PROMPT, OUTPUT, batch, BUDGET).output_tokens_per_s


def test_one_wave_is_a_static_batch_and_whole_waves_repeat_it():
    p = moe()
    b = 500
    one = static_batch(p, b, PROMPT, OUTPUT, BUDGET)
    assert waves_throughput(p, b, b, PROMPT, OUTPUT, BUDGET) == pytest.approx(
        b * OUTPUT / one.e2e_s)
    assert waves_throughput(p, 3 * b, b, PROMPT, OUTPUT, BUDGET) == pytest.approx(
        b * OUTPUT / one.e2e_s)


def test_the_last_partial_wave_runs_at_its_own_smaller_batch():
    p = moe()
    b = 500
    full = static_batch(p, b, PROMPT, OUTPUT, BUDGET).e2e_s
    rest = static_batch(p, 100, PROMPT, OUTPUT, BUDGET).e2e_s
    got = waves_throughput(p, b + 100, b, PROMPT, OUTPUT, BUDGET)
    assert got == pytest.approx((b + 100) * OUTPUT / (full + rest))
    assert got < waves_throughput(p, b, b, PROMPT, OUTPUT, BUDGET)


def test_an_moe_run_with_a_partial_second_wave_follows_the_waves_not_the_steady_state():
    # ~1,400 sequences at once and 30% more requests than that: a full wave and a small one
    p = moe()
    b = kv_batch(p)
    assert b > 1000
    requests = int(1.3 * b)
    engine = scheduler_run(p, requests, b)
    waves = waves_throughput(p, requests, b, PROMPT, OUTPUT, BUDGET)
    flat = steady(p, b)
    # the engine's run is below its steady state, and the waves are close to the engine
    assert flat > 1.05 * engine
    assert abs(waves / engine - 1) < 0.03
    assert abs(waves / engine - 1) < abs(flat / engine - 1) / 3


def test_a_run_of_many_waves_stays_at_its_steady_state():
    # a few hundred at once, ten times as many requests: ramp and drain are noise
    p = dense()
    b = kv_batch(p)
    requests = 10 * b
    engine = scheduler_run(p, requests, b)
    waves = waves_throughput(p, requests, b, PROMPT, OUTPUT, BUDGET)
    assert abs(steady(p, b) / engine - 1) < 0.03
    assert abs(waves / engine - 1) < 0.03


def test_the_loss_shrinks_with_the_number_of_waves():
    p = moe()
    b = 600
    ratio = [waves_throughput(p, n * b + b // 2, b, PROMPT, OUTPUT, BUDGET) / steady(p, b)
             for n in (1, 3, 10)]
    assert ratio[0] < ratio[1] < ratio[2] <= 1.0


def test_bad_sizes_are_refused():
    with pytest.raises(ProfileError):
        waves_throughput(moe(), 0, 10, PROMPT, OUTPUT, BUDGET)
    with pytest.raises(ProfileError):
        waves_throughput(moe(), 10, 0, PROMPT, OUTPUT, BUDGET)


def offline_figure() -> Figure:
    return Figure(id="x", source="s", model="qwen3-30b-a3b", hardware="b200", chips=1,
               precision="fp4", kv_precision="fp8", scenario="serving", batch=3000,
               requests=3000, max_batch=4096, prompt_tokens=PROMPT, output_tokens=OUTPUT,
               metric="throughput", value=1.0, unit="tok/s",
               engine="TensorRT-LLM 1.2 (PyTorch backend, trtllm-bench)")


def test_a_figure_of_an_offline_run_is_predicted_as_waves():
    f = offline_figure()
    assert is_offline_waves(f)
    w = workload(f, CAT)
    want = waves_throughput(placement(f, CAT), 3000, w.running, PROMPT, OUTPUT, BUDGET)
    assert predict_figure(f, CAT) == pytest.approx(want)
    # without a request count it is the steady state; lengths that vary desynchronise the
    # users (a ragged drain instead); latencies are the steady state's
    no_count = dataclasses.replace(f, requests=None)
    assert not is_offline_waves(no_count)
    flat = predict_figure(no_count, CAT)
    assert flat == pytest.approx(w.output_tokens_per_s)
    assert flat is not None and flat > want
    assert not is_offline_waves(dataclasses.replace(f, length_ratio=0.8))
    assert not is_offline_waves(dataclasses.replace(f, metric="itl", unit="s"))
