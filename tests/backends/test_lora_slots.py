"""LoRA adapters in the scheduler (fastmode/backends/lora.py): vLLM's max_loras rule and its physics.

A replica of llama-3.1-8b on one H100, stepped by hand on its own clock: a cold adapter's
request waits while the batch already mixes ``max_loras`` adapters, requests behind it go
ahead, the step that brings an adapter in pays its copy over the host link, and every step
that runs adapters pays their GEMMs; the base model's steps are untouched."""

from __future__ import annotations

import pytest

from fastmode.backends.background import Background
from fastmode.backends.lora import LoraSlots, LoraSpec, adapter_params, copy_seconds, make_adapter
from fastmode.backends.perf import Placement
from fastmode.backends.profiles import Catalog
from fastmode.backends.scheduler import FINISHED, WAITING, Limits, Scheduler, Sequence
from fastmode.backends.sleep import PCIE5_GBS

CAT = Catalog.builtin()
PLACEMENT = Placement(CAT.get_model("llama-3.1-8b"), CAT.get_hardware("h100-sxm"), 1, "bf16")


def adapter(name: str, int_id: int, rank: int = 16):
    return make_adapter(PLACEMENT, name, int_id, f"/adapters/{name}", rank, "llama")


def replica(max_loras: int = 1, max_rank: int = 16) -> Scheduler:
    sched = Scheduler(PLACEMENT, Limits(max_batch=8, max_batched_tokens=2048,
                                        prefix_caching=False), Background())
    sched.lora = LoraSlots(LoraSpec(max_loras, max_rank), PLACEMENT)
    return sched


def seq(i: int, lora=None, prompt: int = 100, output: int = 5) -> Sequence:
    s = Sequence(i, prompt, output, 0.0)
    s.lora = lora
    return s


def run(sched: Scheduler, until_done: list[Sequence]) -> list:
    now, steps = 0.0, []
    while any(s.state != FINISHED for s in until_done):
        result = sched.step(now)
        assert result is not None
        steps.append(result)
        now = result.end
    return steps


def test_adapter_size_is_the_attention_projections_at_its_rank() -> None:
    m = PLACEMENT.model
    per_layer = 4 * m.d_model + 2 * m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim
    a = adapter("sql", 1, rank=8)
    assert adapter_params(PLACEMENT, 8) == 8 * per_layer * m.layers
    assert a.weight_bytes == 2 * adapter_params(PLACEMENT, 8)
    # the copy is the bytes over PCIe Gen5 (an H100 SXM host)
    assert copy_seconds(PLACEMENT, a) == pytest.approx(a.weight_bytes / (PCIE5_GBS * 1e9))


def test_cold_adapter_waits_while_max_loras_is_full_and_others_overtake() -> None:
    sched = replica(max_loras=1)
    a, b = adapter("a", 1), adapter("b", 2)
    first, cold, base, warm = seq(1, a), seq(2, b), seq(3), seq(4, a)
    for s in (first, cold, base, warm):
        assert sched.submit(s)
    sched.step(0.0)
    # the batch runs adapter a: b's request is passed over, the base model's and a's go ahead
    assert cold.state == WAITING
    assert {first.id, base.id, warm.id} <= {s.id for s in sched.prefilling} | set(sched.decoding)
    assert sched.lora is not None and sched.lora.running == {"a": 2}
    run(sched, [first, cold, base, warm])
    # b joins only once a's last request has left the batch
    assert cold.admitted_at >= max(first.finished_at, warm.finished_at)
    assert sched.lora.loads == 2 and not sched.lora.running


def test_two_slots_mix_two_adapters_at_once() -> None:
    sched = replica(max_loras=2)
    x, y = seq(1, adapter("a", 1)), seq(2, adapter("b", 2))
    sched.submit(x)
    sched.submit(y)
    sched.step(0.0)
    assert x.admitted_at == y.admitted_at == 0.0
    assert sched.lora is not None and set(sched.lora.running) == {"a", "b"}


def test_the_step_that_brings_an_adapter_in_pays_its_copy_and_gemms() -> None:
    a = adapter("a", 1)
    plain = Scheduler(PLACEMENT, Limits(8, 2048, prefix_caching=False), Background())
    plain.submit(seq(1))
    base = plain.step(0.0)
    sched = replica()
    sched.submit(seq(2, a))
    cold = sched.step(0.0)
    assert base is not None and cold is not None
    slots = sched.lora
    assert slots is not None
    hw = PLACEMENT.hardware
    padded = adapter_params(PLACEMENT, 16)
    gemm = max(2 * padded / (hw.memory_bandwidth_tbs * 1e12 * hw.mbu),
               2 * padded * 100 / (hw.peak_flops("bf16") * hw.mfu))
    extra = (cold.end - cold.start) - (base.end - base.start)
    assert extra == pytest.approx(copy_seconds(PLACEMENT, a) + gemm, rel=1e-9)
    assert slots.load_seconds == pytest.approx(copy_seconds(PLACEMENT, a))
    # a later request for the resident adapter pays no copy
    run(sched, list(sched.prefilling) + list(sched.decoding.values()))
    sched.submit(seq(3, a))
    warm = sched.step(10.0)
    assert warm is not None and slots.loads == 1
    assert (warm.end - warm.start) - (base.end - base.start) == pytest.approx(gemm, rel=1e-9)


def test_base_model_steps_are_untouched_by_lora_slots() -> None:
    plain = Scheduler(PLACEMENT, Limits(8, 2048, prefix_caching=False), Background())
    sched = replica()
    for s in (plain, sched):
        s.submit(seq(1))
    a, b = plain.step(0.0), sched.step(0.0)
    assert a is not None and b is not None and a.end == b.end
    assert sched.steady() == plain.steady()


def test_cancelled_adapter_request_frees_its_adapter() -> None:
    sched = replica(max_loras=1)
    x, y = seq(1, adapter("a", 1)), seq(2, adapter("b", 2))
    sched.submit(x)
    sched.submit(y)
    sched.step(0.0)
    sched.cancel(x)
    result = sched.step(1.0)
    assert result is not None and y.admitted_at == 1.0
    assert sched.lora is not None and sched.lora.running == {"b": 1}
