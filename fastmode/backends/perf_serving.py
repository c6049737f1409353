"""What benchmarks measure, from engine steps: closed-loop serving and static batches.

``serving_steady_state`` is a closed-loop serving benchmark (``concurrency`` users, each sending
its next request when the previous one finished) on continuous batching with chunked prefill, as
vLLM / TensorRT-LLM / SGLang run it; ``static_batch`` is a batch that starts and ends together.
Both are steady states built from ``Placement.step``: no clock, no scheduler. See
docs/serving.md ("What a benchmark measures") for the equations and their sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastmode.backends.perf import Placement, prefill_attention_context
from fastmode.backends.profiles import ProfileError

# How the users' requests fall in time (a condition of the benchmark, not of the engine):
#   lockstep  users that start together stay together: fixed prompt and output lengths and no
#             think time (fastmode bench against fastmode, a fixed-length sweep);
#   spread    every request arrives at its own time: lengths that vary (vLLM's random dataset
#             with a range ratio, ShareGPT, production traffic) desynchronise the users.
ARRIVALS = ("lockstep", "spread")
_RHO_MAX = 0.995  # a prefill queue at least this busy is saturated (the closed loop bounds it)


@dataclass(frozen=True)
class Workload:
    """Steady-state figures of a workload on one replica (seconds, tokens/s)."""

    running: int  # sequences in the batch at once
    ttft_s: float  # mean time to first token, queueing included
    itl_s: float  # mean time between two tokens of one sequence (TPOT)
    e2e_s: float  # mean request latency
    output_tokens_per_s: float  # aggregate over the replica
    decode_step_s: float  # a decode step of the running batch without prefill
    prefill_share: float  # share of steps that carry prompt tokens
    queued: int = 0  # users waiting for a slot (closed loop beyond capacity)
    prefill_wait_s: float = 0.0  # part of ttft_s spent waiting for other prompts' steps


def batch_that_fits(p: Placement, wanted: int, tokens_per_seq: int, max_batch: int) -> int:
    """Sequences of ``tokens_per_seq`` tokens of KV that run at once (at least one)."""
    fits = p.kv_capacity_tokens // max(1, tokens_per_seq)
    return max(1, min(wanted, max_batch, fits))


def kv_per_sequence(p: Placement, prompt_tokens: int, output_tokens: int) -> int:
    """KV tokens a running sequence of a closed loop holds for the batch's size: its whole
    reply's when the engine reserves it at admission (TensorRT-LLM's default capacity policy,
    GUARANTEED_NO_EVICT); the mean over its life, the prompt and half the reply, when KV is
    taken as the reply grows (vLLM, SGLang: ``backends.kv_paging``), the users' requests
    being at every stage of their replies at once."""
    return prompt_tokens + (output_tokens // 2 if p.kv_paged else output_tokens)


def serving_steady_state(
    p: Placement,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    max_batch: int = 256,
    max_batched_tokens: int = 8192,
    arrivals: str = "lockstep",
    lag_steps: float = 0,
    request_overhead: bool = False,
) -> Workload:
    """A closed-loop serving benchmark: ``concurrency`` users, each sending its next request
    (``prompt_tokens`` in, ``output_tokens`` out) as soon as the previous one finished.

    Continuous batching with chunked prefill, as vLLM / TensorRT-LLM / SGLang run it:

    - the running batch B is the users that fit (``max_batch`` and the KV cache); the others
      wait, and their wait is counted in TTFT (Little's law over the closed loop);
    - ``arrivals="lockstep"``: users that start together stay in groups. Prompts are packed
      into prefill steps of at most the token budget: u = ceil(B * prompt / budget) steps per
      cycle (one prompt needs k = ceil(prompt / budget) of them); a cycle (one request of
      every user) is n = max(output - 1 + k, u) steps; the other groups' prefill steps fall in
      a request's decode window, a share (u - k) / (n - k) of its steps, and ITL is its mean
      step. TTFT is the request's own prefill steps (its group's prompts together) and any
      wait for the prompt queue when the prompts stretch the cycle;
    - ``arrivals="spread"``: every request arrives on its own (``_spread``): its prompt waits
      for the step in progress and for the prompts ahead of it (a queue of prefill work), then
      takes its own steps beside the others' decodes;
    - TTFT adds ``lag_steps`` mean steps: an engine that schedules a step while the previous
      one runs (vLLM's async scheduling) admits a new request one step later, one that takes
      new requests every N steps (SGLang's ``--scheduler-recv-interval N``) (N - 1) / 2 steps
      later on average (``recv_lag_steps``); and, with
      ``request_overhead``, the hardware profile's ``request_overhead_ms`` (API server,
      tokenizer, streaming, the client): measurements include it (the calibration asks for
      it), fastmode's scheduler does not, so ``fastmode predict`` (the default) matches what
      ``fastmode simulate`` and ``fastmode serve`` produce.
    """
    if concurrency <= 0 or prompt_tokens <= 0 or output_tokens <= 0:
        raise ProfileError("serving: concurrency, prompt and output tokens must be > 0")
    if arrivals not in ARRIVALS:
        raise ProfileError(f"arrivals: {arrivals!r}; allowed: {', '.join(ARRIVALS)}")
    b = batch_that_fits(p, concurrency, kv_per_sequence(p, prompt_tokens, output_tokens),
                        max_batch)
    budget = max(1, max_batched_tokens)
    overhead = first_token_overhead_s(p, prompt_tokens) if request_overhead else 0.0
    if arrivals == "spread":
        return _spread(p, concurrency, b, prompt_tokens, output_tokens, budget, lag_steps,
                       overhead)
    decode_steps = max(0, output_tokens - 1)
    k = math.ceil(prompt_tokens / budget)  # prefill steps of one prompt
    if prompt_tokens > budget:
        u = k * b
        per_step = 1
    else:
        u = max(1, math.ceil(b * prompt_tokens / budget))
        per_step = max(1, min(b, round(b / u)))
    load = max(1, round(b * prompt_tokens / u))  # prompt tokens per prefill step
    n = max(decode_steps + k, u)  # steps per cycle
    ctx = prompt_tokens + output_tokens / 2  # mean context of a decoding sequence
    dec = b - per_step  # sequences decoding beside a prefill step
    done = 0 if k == 1 else (prompt_tokens - load) // 2  # a chunk mid-way through its prompt
    pre_ctx = per_step * prefill_attention_context(max(1, load // per_step), done)
    t_pre = p.step_seconds(dec, dec * ctx, load, pre_ctx)
    t_dec = p.step_seconds(b, b * ctx) if decode_steps else t_pre
    others = (u - k) / (n - k) if n > k else 0.0  # share of my decode steps carrying a prompt
    itl = t_dec + min(1.0, max(0.0, others)) * (t_pre - t_dec) if decode_steps else t_pre
    mean_step = (u * t_pre + (n - u) * t_dec) / n
    queue_steps = max(0, n - decode_steps - k)  # waiting for the prompt queue
    queue_wait = (queue_steps + max(0, lag_steps)) * mean_step
    ttft_service = k * t_pre + queue_wait + overhead
    cycle = ttft_service + decode_steps * itl
    return _closed_loop(concurrency, b, output_tokens, ttft_service, itl, cycle, t_dec,
                        u / n, queue_wait)


def recv_lag_steps(interval: int) -> float:
    """Mean steps a request waits before the engine sees it when its scheduler takes new
    requests every ``interval`` steps (SGLang's ``--scheduler-recv-interval``, default 1): an
    arrival falls uniformly among the steps between two polls, (interval - 1) / 2 whole steps
    on top of the step in progress that every engine makes it wait."""
    if interval < 1:
        raise ProfileError(f"scheduler-recv-interval: must be >= 1, got {interval}")
    return (interval - 1) / 2


def first_token_overhead_s(p: Placement, prompt_tokens: int) -> float:
    """The time to the first token besides the steps: the profile's ``request_overhead_ms``
    and its API server's tokenizing of the prompt, ``request_us_per_prompt_token`` each."""
    hw = p.hardware
    return hw.request_overhead_ms * 1e-3 + hw.request_us_per_prompt_token * 1e-6 * prompt_tokens


def _closed_loop(concurrency: int, b: int, output_tokens: int, ttft: float, itl: float,
                 cycle: float, t_dec: float, prefill_share: float, wait_pre: float) -> Workload:
    """The figures of a cycle, with the users beyond the batch waiting for a slot: each of C
    users waits for one of B slots, ``cycle * (C - B) / B`` by Little's law."""
    queued = max(0, concurrency - b)
    wait = cycle * queued / b
    return Workload(
        running=b,
        ttft_s=ttft + wait,
        itl_s=itl,
        e2e_s=cycle + wait,
        output_tokens_per_s=b * output_tokens / cycle,
        decode_step_s=t_dec,
        prefill_share=prefill_share,
        queued=queued,
        prefill_wait_s=wait_pre,
    )


def _spread(p: Placement, concurrency: int, b: int, prompt: int, output: int,
            budget: int, lag_steps: float = 0, overhead: float = 0.0) -> Workload:
    """Closed loop whose requests arrive independently (lengths that vary desynchronise them).

    A prompt is cut into k chunks of what the step budget leaves beside the others' B - 1
    decode tokens, each in a step of duration t_pre (the chunk and B - 1 decodes); the other
    steps are pure decode steps of duration t_dec. With requests arriving at rate lambda (of
    the other users, lambda_o = lambda (B - 1) / B), the engine spends rho = lambda_o * S of
    its time in their prefill steps (S = k * t_pre). An arriving prompt waits for:

    - the decode step in progress, if any: (1 - rho) * t_dec / 2 on average;
    - the prefill work ahead of it, the Pollaczek-Khinchine mean wait of a queue with Poisson
      arrivals and deterministic service: lambda_o * S^2 / (2 (1 - rho)), at most the (B - 1)
      prompts of the other users;

    (and ``lag_steps`` mean steps if the engine schedules ahead) then takes its own S. Its
    decode window sees lambda_o k prefill steps per second and
    decode steps in the rest of the time, so ITL = 1 / (lambda_o k + (1 - rho) / t_dec). The
    closed loop fixes lambda: B / lambda = TTFT + (output - 1) * ITL (solved by bisection;
    the right side grows with lambda, the left falls).
    """
    m = SpreadModel(p, b, prompt, output, budget, lag_steps, overhead, (b - 1) / b)
    lo_lam, hi_lam = 0.0, b / (m.service + overhead + m.decode_steps * m.t_dec)
    for _ in range(60):
        mid = (lo_lam + hi_lam) / 2
        if mid > 0 and b / mid > m.at(mid)[2]:
            lo_lam = mid
        else:
            hi_lam = mid
    ttft, itl, cycle, wait, prefill_share = m.at(lo_lam if lo_lam > 0 else hi_lam)
    return _closed_loop(concurrency, b, output, ttft, itl, cycle, m.t_dec,
                        min(1.0, prefill_share), wait)


class SpreadModel:
    """The figures of ``b`` sequences running with independent arrivals, as functions of the
    arrival rate (``_spread``'s queue model; ``share`` of the arrivals are the others')."""

    def __init__(self, p: Placement, b: int, prompt: int, output: int, budget: int,
                 lag_steps: float, overhead: float, share: float) -> None:
        self.decode_steps = max(0, output - 1)
        room = max(1, budget - (b - 1))  # the step budget left beside the others' decodes
        self.k = math.ceil(prompt / room)
        chunk = max(1, round(prompt / self.k))
        done = 0 if self.k == 1 else (prompt - chunk) // 2  # a chunk mid-way through its prompt
        ctx = prompt + output / 2  # mean context of a decoding sequence
        self.dec = dec = b - 1
        self.t_pre = p.step_seconds(dec, dec * ctx, chunk, prefill_attention_context(chunk, done))
        self.t_dec = p.step_seconds(b, b * ctx)
        self.t_idle = p.step_seconds(dec, dec * ctx) if dec else 0.0  # the step in progress
        self.service = self.k * self.t_pre
        self.share, self.lag, self.overhead = share, lag_steps, overhead

    def at(self, lam: float) -> tuple[float, float, float, float, float]:
        """(TTFT, ITL, request latency, prefill wait, share of steps carrying a prompt)."""
        lo = lam * self.share
        s = self.service
        rho = min(lo * s, _RHO_MAX)
        itl = 1.0 / (lo * self.k + (1.0 - rho) / self.t_dec) if self.decode_steps else self.t_pre
        wait = min(lo * s * s / (2.0 * (1.0 - rho)), self.dec * s)
        wait += (1.0 - rho) * self.t_idle / 2.0 + max(0, self.lag) * itl
        ttft = wait + s + self.overhead
        return ttft, itl, ttft + self.decode_steps * itl, wait, lo * self.k * itl

    def saturated(self, lam: float) -> bool:
        return lam * self.share * self.service >= _RHO_MAX


def finite_run_throughput(w: Workload, requests: int) -> float:
    """Output tokens/s of a benchmark run of ``requests`` requests in all, not of its steady
    state: a closed-loop (or all-at-once) run spends requests / B cycles at the steady rate,
    then drains: its last B requests finish spread over one more cycle, half a cycle of the
    steady rate lost on average. Benchmarks report total output tokens / wall time."""
    rounds = max(1.0, requests / max(1, w.running))
    return w.output_tokens_per_s * rounds / (rounds + 0.5)


def waves_throughput(p: Placement, requests: int, batch: int, prompt_tokens: int,
                     output_tokens: int, max_batched_tokens: int | None = None) -> float:
    """Output tokens/s of an offline run that queues ``requests`` requests of one fixed length
    at once on an engine that runs ``batch`` of them at a time (``trtllm-bench throughput``
    with a dataset of one ISL / OSL): a run of waves, not a steady state.

    The first ``batch`` requests are admitted together, their prompts prefilled in steps of the
    token budget, then they decode together and, with one output length, finish within the
    few steps their prefill was spread over: the next ``batch`` start together the same way,
    and the last wave holds what is left. Each wave is a static batch (``static_batch``); the
    run's throughput is all output tokens over the waves' summed time. Against the steady state
    (``serving_steady_state``: prompts spread over the cycle, prefill riding along the others'
    decode steps, every step at the full batch) it loses the prefill steps that carry no decode
    and the last wave's partial batch: little when requests / batch is large (a dense model's
    run of 3,000 requests, ~350 at a time: 1-4%), 5-25% when it is 1-2 (an MoE model with
    thousands of sequences in the KV cache: the perf overview's 3,000 requests, 1,400-3,000 at a
    time). Checked against the continuous-batching scheduler (fastmode/backends/scheduler.py) running
    the same queue: within ~7 points of its throughput on the perf overview's runs
    (docs/calibration.md, "Offline runs are waves")."""
    if requests <= 0 or batch <= 0:
        raise ProfileError("waves: requests and batch must be > 0")
    full, rest = divmod(requests, batch)
    seconds = full * static_batch(p, batch, prompt_tokens, output_tokens,
                                  max_batched_tokens).e2e_s if full else 0.0
    if rest:
        seconds += static_batch(p, rest, prompt_tokens, output_tokens, max_batched_tokens).e2e_s
    return requests * output_tokens / seconds


def static_batch(
    p: Placement,
    batch: int,
    prompt_tokens: int,
    output_tokens: int,
    max_batched_tokens: int | None = None,
    request_overhead: bool = False,
) -> Workload:
    """A static batch: ``batch`` requests start together, their prompts are prefilled (in one
    step, or in steps of ``max_batched_tokens``), then every step decodes all of them until
    they finish together (TensorRT-LLM's gptSessionBenchmark, vLLM's benchmark_latency,
    LMDeploy's profile_generation). Throughput is batch * output / end-to-end time. TTFT
    includes the hardware profile's ``request_overhead_ms`` (what the engine's benchmark
    harness spends before the first token besides the steps) with ``request_overhead``.
    """
    if batch <= 0 or prompt_tokens <= 0 or output_tokens <= 0:
        raise ProfileError("static batch: batch, prompt and output tokens must be > 0")
    total = batch * prompt_tokens
    step_tokens = total if max_batched_tokens is None else max(1, max_batched_tokens)
    # every prefill step but the last carries the same tokens (whole prompts, fractional when
    # chunked): one step time for them all, another for the rest
    full, rest = divmod(total, step_tokens)
    per_prompt = prefill_attention_context(prompt_tokens, 0)
    ttft = 0.0
    for c, n in ((step_tokens, full), (rest, 1 if rest else 0)):
        if n:
            ttft += n * p.step_seconds(0, 0.0, c, c / prompt_tokens * per_prompt)
    if request_overhead:  # the benchmark harness's own time to the first token
        ttft += first_token_overhead_s(p, prompt_tokens)
    steps = max(0, output_tokens - 1)
    # decode steps with contexts growing linearly: the mean of the first and last step is exact
    # below the memory/compute kink and within a hair of it above
    first = p.step_seconds(batch, batch * (prompt_tokens + 1))
    last = p.step_seconds(batch, batch * (prompt_tokens + output_tokens - 1))
    mid = p.step_seconds(batch, batch * (prompt_tokens + output_tokens / 2))
    itl = (first + 4 * mid + last) / 6 if steps else 0.0  # Simpson over the stretch
    e2e = ttft + steps * itl
    return Workload(
        running=batch,
        ttft_s=ttft,
        itl_s=itl,
        e2e_s=e2e,
        output_tokens_per_s=batch * output_tokens / e2e,
        decode_step_s=mid,
        prefill_share=0.0,
    )


__all__ = ["ARRIVALS", "SpreadModel", "Workload", "batch_that_fits", "kv_per_sequence", "finite_run_throughput",
           "first_token_overhead_s", "recv_lag_steps",
           "waves_throughput",
           "serving_steady_state", "static_batch"]
