"""Steady-state predictions: what one request sees on a placement or on a tier of the config.

``predict_placement`` is the closed-form answer for a model on hardware under a closed-loop load
of ``batch`` users (``perf_serving.serving_steady_state``, no scheduler); ``predict_tier`` runs one
request through the virtual driver on a configured deployment under its background load, which
is what a lone user of that tier sees. Both return plain dicts (the ``--json`` output of ``fastmode predict``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from fastmode.backends.calibrate.engines import EngineProfile, load_engines
from fastmode.backends.drivers import Arrival, VirtualDriver
from fastmode.backends.engine import EngineSpec
from fastmode.backends.perf import Placement, StepTime
from fastmode.backends.perf_modes import disaggregated, open_loop
from fastmode.backends.perf_serving import recv_lag_steps, serving_steady_state
from fastmode.backends.profiles import Catalog, ProfileError
from fastmode.backends.scheduler import Sequence
from fastmode.backends.speculative import SpeculativePlacement, mtp_draft, speculative_placement


class PredictError(ValueError):
    """A prediction's input is invalid; the message names the field and what is allowed."""


def _positive(name: str, value: int | float) -> None:
    if not value > 0:
        raise PredictError(f"{name}: must be > 0, got {value}")


def _check_context(
    model_name: str, window: int, prompt_tokens: int, output_tokens: int
) -> None:
    if prompt_tokens >= window:
        raise PredictError(
            f"prompt-tokens: {prompt_tokens} does not fit the context window of "
            f"{model_name} ({window} tokens)"
        )
    if prompt_tokens + output_tokens > window:
        raise PredictError(
            f"output-tokens: {prompt_tokens} prompt + {output_tokens} output tokens exceed the "
            f"context window of {model_name} ({window} tokens); at most "
            f"{window - prompt_tokens} output tokens"
        )


def _breakdown(step: StepTime) -> dict[str, float]:
    return dict(step.breakdown)


def placement_summary(p: Placement) -> dict[str, Any]:
    return {
        "model": p.model.name,
        "hardware": p.hardware.name,
        "chips": p.chips,
        "precision": p.precision,
        "kv_precision": p.kv_precision,
        "weights_gb": p.weight_bytes / 1e9,
        "usable_memory_gb": p.usable_memory_bytes / 1e9,
        "kv_bytes_per_token": p.kv_bytes_per_token,
        "kv_capacity_tokens": p.kv_capacity_tokens,
    }


@dataclass(frozen=True)
class PlacementOptions:
    """How a placement is served (``fastmode predict`` flags): the engine, the parallelism,
    speculative decoding, prefill/decode disaggregation and the arrival process."""

    engine: str | None = None  # an engine of fastmode/backends/data/engines.toml (None: the hardware's)
    attention_dp: bool = False
    expert_parallel: int = 1
    memory_fraction: float | None = None  # the engine's memory share (None: its default)
    speculative: str | None = None  # a draft model, or "mtp" (the model's own MTP layer)
    draft_tokens: int = 4
    acceptance: float = 0.7
    draft_chips: int | None = None  # chips the draft runs on (None: all of the replica's)
    prefill_chips: int | None = None  # disaggregated: a prefill replica of this many chips
    rate: float | None = None  # open loop: Poisson arrivals at this rate (req/s)
    # the scheduler takes new requests every N steps (SGLang's --scheduler-recv-interval)
    recv_interval: int = 1


def _engine(name: str | None) -> EngineProfile | None:
    if name is None:
        return None
    engines = load_engines()
    if name not in engines:
        raise PredictError(f"engine: unknown {name!r}; allowed: {', '.join(sorted(engines))}")
    return engines[name]


def build_placement(catalog: Catalog, model: str, hardware: str, chips: int,
                    precision: str | None, max_batched_tokens: int, *,
                    kv_precision: str | None = None,
                    options: PlacementOptions | None = None) -> tuple[Placement, bool]:
    """The replica a prediction runs on, and whether an engine's overheads apply."""
    o = options or PlacementOptions()
    m = catalog.get_model(model)
    hw = catalog.get_hardware(hardware)
    precision = precision or m.default_precision
    eng = _engine(o.engine)
    memory: dict[str, Any] = {}
    read = 1.0
    if eng is not None and hw.kind == "gpu":
        hw = eng.hardware(hw)
        read = eng.kv_read_factor(m)
        memory = eng.memory(o.memory_fraction, max_batched_tokens)
    elif o.memory_fraction is not None:
        memory = {"memory_utilization": o.memory_fraction}
    try:
        p: Placement = Placement(m, hw, chips, precision, kv_precision=kv_precision,
                                 kv_read_factor=read, attention_dp=o.attention_dp,
                                 expert_parallel=o.expert_parallel, **memory)
        if o.speculative:
            if o.speculative == "mtp":
                draft = mtp_draft(m)
            else:
                draft = catalog.get_model(o.speculative)
            if not 0 < o.acceptance < 1 or o.draft_tokens < 1:
                raise PredictError("acceptance: must be in (0, 1), draft-tokens >= 1")
            p = speculative_placement(p, draft, o.draft_chips or chips, o.draft_tokens,
                                      o.acceptance)
    except ProfileError as exc:
        raise PredictError(str(exc)) from None
    return p, eng is not None


def predict_placement(
    catalog: Catalog,
    model: str,
    hardware: str,
    chips: int,
    precision: str | None,
    batch: int,
    prompt_tokens: int,
    output_tokens: int,
    max_batched_tokens: int = 8192,
    *,
    kv_precision: str | None = None,
    max_batch: int = 256,
    options: PlacementOptions | None = None,
) -> dict[str, Any]:
    """Steady state of ``batch`` concurrent users, each sending ``prompt_tokens`` in and
    ``output_tokens`` out and its next request as soon as one finishes (a closed-loop serving
    benchmark, as `fastmode bench --concurrency`, vLLM's benchmark_serving or NIM's AIPerf run),
    or, with ``options.rate``, of Poisson arrivals at that rate (``perf_modes.open_loop``).

    ``perf_serving.serving_steady_state``: the users that fit the KV cache (and ``max_batch``) run
    together, the others wait for a slot (their wait is in TTFT, and the placement is not
    refused); ITL is the mean step, prompts of the others riding along (chunked prefill);
    throughput counts every output token over the requests' whole cycle. ``options`` adds
    the engine (its overheads, kernels and memory rule; its time to the first token is then in
    TTFT, as a benchmark of it measures), attention data parallelism, expert parallelism,
    speculative decoding, prefill/decode disaggregation (``perf_modes.disaggregated``) and a
    scheduler that takes new requests every ``recv_interval`` steps (``recv_lag_steps``).
    """
    o = options or PlacementOptions()
    _positive("chips", chips)
    _positive("batch", batch)
    _positive("prompt-tokens", prompt_tokens)
    _positive("output-tokens", output_tokens)
    _positive("max-batched-tokens", max_batched_tokens)
    _positive("max-batch", max_batch)
    if o.rate is not None:
        _positive("rate", o.rate)
    p, with_engine = build_placement(catalog, model, hardware, chips, precision,
                                     max_batched_tokens, kv_precision=kv_precision, options=o)
    m, hw = p.model, p.hardware
    _check_context(m.name, m.context_window, prompt_tokens, output_tokens)
    per_seq = prompt_tokens + output_tokens
    if per_seq > p.kv_capacity_tokens:
        raise PredictError(
            f"prompt-tokens: one sequence of {per_seq} tokens needs more KV cache than "
            f"{m.name} on {chips} x {hw.name} at {p.precision} holds ({p.kv_capacity_tokens} "
            f"tokens); use more chips or an fp8 KV cache (kv_precision)"
        )
    extra: dict[str, Any] = {}
    total_chips = chips
    try:
        lag = recv_lag_steps(o.recv_interval)
        if o.prefill_chips is not None and lag:
            raise PredictError("scheduler-recv-interval: not modelled with --prefill-chips")
        if o.prefill_chips is not None:
            _positive("prefill-chips", o.prefill_chips)
            pre = replace(p, chips=o.prefill_chips) if not isinstance(
                p, SpeculativePlacement) else Placement(
                m, p.hardware, o.prefill_chips, p.precision, kv_precision=kv_precision,
                kv_read_factor=p.kv_read_factor, attention_dp=p.attention_dp)
            d = disaggregated(p, pre, prompt_tokens, output_tokens,
                              concurrency=None if o.rate else batch, rate=o.rate,
                              max_batch=max_batch, max_batched_tokens=max_batched_tokens,
                              request_overhead=with_engine)
            w = d.workload
            total_chips += o.prefill_chips
            extra = {"prefill_chips": o.prefill_chips, "prefill_s": d.prefill_s,
                     "kv_transfer_s": d.transfer_s,
                     "prefill_utilization": d.prefill_utilization}
        elif o.rate is not None:
            w = open_loop(p, o.rate, prompt_tokens, output_tokens, max_batch,
                          max_batched_tokens, lag_steps=lag, request_overhead=with_engine)
        else:
            w = serving_steady_state(p, batch, prompt_tokens, output_tokens, max_batch,
                                     max_batched_tokens, lag_steps=lag,
                                     request_overhead=with_engine)
    except ProfileError as exc:
        raise PredictError(str(exc)) from None
    ctx = prompt_tokens + output_tokens / 2
    step = p.step(w.running, w.running * ctx)
    hourly = total_chips * hw.price_per_hour_usd
    return {
        "mode": "placement",
        **placement_summary(p),
        "engine": o.engine,
        "attention_dp": o.attention_dp,
        "expert_parallel": o.expert_parallel,
        "speculative": o.speculative,
        "arrivals": "poisson" if o.rate is not None else "closed",
        "rate": o.rate,
        "scheduler_recv_interval": o.recv_interval,
        "batch": batch,
        "running_batch": w.running,
        "queued": w.queued,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "max_batched_tokens": max_batched_tokens,
        "max_batch": max_batch,
        "ttft_s": w.ttft_s,
        "itl_s": w.itl_s,
        "decode_step_s": w.decode_step_s,
        "prefill_step_share": w.prefill_share,
        "e2e_s": w.e2e_s,
        "output_tokens_per_s_per_user": 1.0 / w.itl_s,
        "output_tokens_per_s_total": w.output_tokens_per_s,
        "bound": step.bound,
        "step_breakdown_s": _breakdown(step),
        **extra,
        "chips_total": total_chips,
        "hardware_usd_per_hour": hourly,
        "hardware_usd_per_million_output_tokens": hourly / 3600 / w.output_tokens_per_s * 1e6,
    }


def predict_tier(
    spec: EngineSpec,
    tier_name: str,
    prompt_tokens: int = 2000,
    output_tokens: int = 500,
    reference_tier: str = "standard",
) -> dict[str, Any]:
    """One request alone on the tier's deployment, beside the deployment's background load.

    ``reference_tier`` is the config's ``pricing.reference_tier``: price and hardware-cost
    factors are relative to it.
    """
    try:
        tier = spec.tiers[tier_name]
    except KeyError:
        raise PredictError(
            f"tier: unknown {tier_name!r}; allowed: {', '.join(sorted(spec.tiers))}"
        ) from None
    _positive("prompt-tokens", prompt_tokens)
    _positive("output-tokens", output_tokens)
    dep = tier.deployment
    p, bg = dep.placement, dep.background
    _check_context(p.model.name, p.model.context_window, prompt_tokens, output_tokens)

    done: list[Sequence] = []
    rejected: list[str] = []
    driver = VirtualDriver(
        {dep.name: dep},
        on_finish=done.append,
        on_reject=lambda _a, reason: rejected.append(reason),
    )
    driver.run([Arrival(0.0, dep.name, prompt_tokens, output_tokens)])
    if rejected or not done:
        free = p.kv_capacity_tokens - bg.kv_tokens
        raise PredictError(
            f"prompt-tokens: a request of {prompt_tokens + output_tokens} tokens does not fit "
            f"the KV cache left by the background load of tier {tier_name!r} ({free} tokens)"
        )
    seq = done[0]
    ttft = seq.first_token_at - seq.arrival
    batch = bg.seqs + 1
    ctx = prompt_tokens + output_tokens / 2
    step = p.step(
        batch,
        bg.kv_tokens + ctx,
        bg.prefill_tokens_per_step,
        bg.prefill_context,
    )
    if output_tokens > 1:
        itl = (seq.finished_at - seq.first_token_at) / (output_tokens - 1)
    else:
        itl = step.total_s
    ref_name = reference_tier
    ref = spec.tiers[ref_name]
    hw_factor = dep.cost_per_token / ref.deployment.cost_per_token
    price_factor = (
        tier.derived_price_factor
        if tier.derived_price_factor is not None
        else (tier.prices.output / ref.prices.output if ref.prices.output else math.nan)
    )
    return {
        "mode": "tier",
        "tier": tier_name,
        "deployment": dep.name,
        **placement_summary(p),
        "replicas": dep.replicas,
        "max_batch": dep.limits.max_batch,
        "max_batched_tokens": dep.limits.max_batched_tokens,
        "background_seqs": bg.seqs,
        "background_context_tokens": bg.context_tokens,
        "background_prefill_tokens_per_step": bg.prefill_tokens_per_step,
        "batch": batch,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "ttft_s": ttft,
        "itl_s": itl,
        "e2e_s": seq.finished_at - seq.arrival,
        "output_tokens_per_s_per_user": 1.0 / itl,
        "output_tokens_per_s_total": batch / itl,
        "bound": step.bound,
        "step_breakdown_s": _breakdown(step),
        "prices_usd_per_million_tokens": {
            "input": tier.prices.input,
            "cached_input": tier.prices.cached_input,
            "output": tier.prices.output,
        },
        "reference_tier": ref_name,
        "price_factor": price_factor,
        "price_derived": tier.derived_price_factor is not None,
        "hardware_cost_factor": hw_factor,
        "hardware_usd_per_million_output_tokens": dep.cost_per_token * 1e6,
    }

