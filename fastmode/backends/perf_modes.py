"""Two more ways to run a replica, as steady states: open-loop Poisson arrivals, and prefill /
decode disaggregation. Pure functions over ``Placement`` steps, like perf_serving.

- ``open_loop``: requests arrive as a Poisson process at ``rate`` per second whatever the
  engine does (vLLM's ``benchmark_serving --request-rate R``, production traffic). The mean
  number of requests in the replica follows Little's law, N = rate x latency, and the latency
  depends on N (the batch each step carries): the steady state is the smallest batch b with
  rate x latency(b) <= b, each request arriving on its own (``SpreadModel``: its prompt waits
  for the prefill work ahead of it, a Pollaczek-Khinchine queue, then rides beside the others'
  decodes). A rate the replica cannot serve (the prompt queue or the batch saturates) is an
  error that says what the replica can take.
- ``disaggregated``: prompts are prefilled on their own replica of ``prefill`` chips and the
  KV cache is shipped to the decode replica (NVIDIA Dynamo, SGLang / vLLM P/D disaggregation,
  TensorRT-LLM's disaggregated serving, its tech blog 5). A prompt waits for the prefill
  replica (Poisson arrivals, deterministic service: the Pollaczek-Khinchine wait), is
  prefilled alone in chunks of the step budget (the prefill replica emits the first token),
  its KV crosses the interconnect (NVLink inside a scale-up domain, the scale-out network
  beyond), and every decode step is a pure decode step: no prompt rides along, so the ITL is
  the decode batch's step alone. The price is the prefill replica's chips, idle between
  prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmode.backends.perf import Placement
from fastmode.backends.perf_serving import (
    _RHO_MAX,
    SpreadModel,
    Workload,
    batch_that_fits,
    first_token_overhead_s,
)
from fastmode.backends.profiles import ProfileError


def open_loop(p: Placement, rate: float, prompt_tokens: int, output_tokens: int,
              max_batch: int = 256, max_batched_tokens: int = 8192, lag_steps: float = 0,
              request_overhead: bool = False) -> Workload:
    """Steady state of Poisson arrivals at ``rate`` requests/s (see the module doc)."""
    if not rate > 0 or prompt_tokens <= 0 or output_tokens <= 0:
        raise ProfileError("open loop: rate, prompt and output tokens must be > 0")
    cap = batch_that_fits(p, 1 << 30, prompt_tokens + output_tokens, max_batch)
    overhead = first_token_overhead_s(p, prompt_tokens) if request_overhead else 0.0
    budget = max(1, max_batched_tokens)

    def model(b: int) -> SpreadModel:
        return SpreadModel(p, b, prompt_tokens, output_tokens, budget, lag_steps, overhead, 1.0)

    def fits(b: int) -> bool:
        m = model(b)
        return not m.saturated(rate) and rate * m.at(rate)[2] <= b

    if not fits(cap):
        m = model(cap)
        served = cap / m.at(0.0)[2]
        prefill = _RHO_MAX / m.service
        raise ProfileError(
            f"rate: {rate:g} requests/s is more than the replica serves (at most ~"
            f"{min(served, prefill):.3g} requests/s: {cap} sequences at once, prompts at "
            f"{prefill:.3g}/s); use more replicas (fastmode simulate) or a lower rate")
    lo, hi = 1, cap
    while lo < hi:  # the smallest batch that carries the rate
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    m = model(lo)
    ttft, itl, latency, wait, share = m.at(rate)
    return Workload(running=lo, ttft_s=ttft, itl_s=itl, e2e_s=latency,
                    output_tokens_per_s=rate * output_tokens, decode_step_s=m.t_dec,
                    prefill_share=min(1.0, share), queued=0, prefill_wait_s=wait)


@dataclass(frozen=True)
class Disaggregated:
    """A disaggregated serving unit's steady state: the ``Workload`` and its parts."""

    workload: Workload
    prefill_s: float  # one prompt alone on the prefill replica
    transfer_s: float  # its KV from the prefill to the decode replica
    prefill_utilization: float  # share of time the prefill replica is busy


def kv_transfer_seconds(decode: Placement, prefill_chips: int, prompt_tokens: int,
                        link_gbs: float | None = None) -> float:
    """A prompt's KV cache over the link between the two replicas: NVLink when both fit one
    scale-up domain, the scale-out network (per chip of the sender) otherwise; ``link_gbs``:
    that link's bandwidth per chip instead of the hardware's."""
    hw = decode.hardware
    chips = decode.chips + prefill_chips
    link = hw.interconnect_gbs if chips <= hw.scale_up_domain else hw.scale_out_gbs
    if link_gbs is not None:
        link = link_gbs
    latency = hw.interconnect_latency_us if chips <= hw.scale_up_domain \
        else hw.scale_out_latency_us
    kv = prompt_tokens * decode.kv_bytes_per_token
    return latency * 1e-6 + kv / (link * 1e9 * max(1, prefill_chips))


def disaggregated(decode: Placement, prefill: Placement, prompt_tokens: int,
                  output_tokens: int, *, concurrency: int | None = None,
                  rate: float | None = None, max_batch: int = 256,
                  max_batched_tokens: int = 8192,
                  request_overhead: bool = False) -> Disaggregated:
    """Steady state of ``concurrency`` closed-loop users or Poisson arrivals at ``rate`` on a
    prefill replica and a decode replica (see the module doc)."""
    if (concurrency is None) == (rate is None):
        raise ProfileError("disaggregated: give concurrency or rate")
    if prompt_tokens <= 0 or output_tokens <= 0:
        raise ProfileError("disaggregated: prompt and output tokens must be > 0")
    service = prefill.prefill_seconds(prompt_tokens, max(1, max_batched_tokens))
    transfer = kv_transfer_seconds(decode, prefill.chips, prompt_tokens)
    overhead = first_token_overhead_s(decode, prompt_tokens) if request_overhead else 0.0
    steps = max(0, output_tokens - 1)
    ctx = prompt_tokens + output_tokens / 2
    cap = batch_that_fits(decode, 1 << 30, prompt_tokens + output_tokens, max_batch)

    def at(lam: float, b: int) -> tuple[float, float, float, float]:
        rho = min(lam * service, _RHO_MAX)
        wait = lam * service * service / (2.0 * (1.0 - rho))
        ttft = wait + service + overhead
        itl = decode.step_seconds(b, b * ctx) if steps else 0.0
        return ttft, itl, ttft + transfer + steps * itl, wait

    if concurrency is not None:
        if concurrency <= 0:
            raise ProfileError("disaggregated: concurrency must be > 0")
        b = min(concurrency, cap)
        lo, hi = 0.0, b / (service + transfer + steps * at(0.0, b)[1] + overhead)
        for _ in range(60):  # the closed loop: b / lambda = latency(lambda)
            mid = (lo + hi) / 2
            if mid > 0 and b / mid > at(mid, b)[2]:
                lo = mid
            else:
                hi = mid
        lam = lo if lo > 0 else hi
        ttft, itl, latency, wait = at(lam, b)
        queued = max(0, concurrency - b)
        slot_wait = latency * queued / b
        w = Workload(running=b, ttft_s=ttft + slot_wait, itl_s=itl, e2e_s=latency + slot_wait,
                     output_tokens_per_s=b * output_tokens / latency, decode_step_s=itl,
                     prefill_share=0.0, queued=queued, prefill_wait_s=wait)
        return Disaggregated(w, service, transfer, lam * service)
    assert rate is not None
    if not rate > 0 or rate * service >= _RHO_MAX:
        raise ProfileError(f"rate: {rate:g} requests/s is more than the prefill replica "
                           f"serves (~{_RHO_MAX / service:.3g} prompts/s)")
    b = 1
    while b <= cap and rate * at(rate, b)[2] > b:
        b += max(1, b // 8)
    if b > cap:
        raise ProfileError(f"rate: {rate:g} requests/s needs more than the {cap} sequences the "
                           "decode replica holds; use more replicas or a lower rate")
    ttft, itl, latency, wait = at(rate, b)
    w = Workload(running=b, ttft_s=ttft, itl_s=itl, e2e_s=latency,
                 output_tokens_per_s=rate * output_tokens, decode_step_s=itl,
                 prefill_share=0.0, queued=0, prefill_wait_s=wait)
    return Disaggregated(w, service, transfer, rate * service)


__all__ = ["Disaggregated", "disaggregated", "kv_transfer_seconds", "open_loop"]
