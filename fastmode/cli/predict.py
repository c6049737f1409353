"""``fastmode predict``: the physics from a terminal, for a placement or a tier of the config."""

from __future__ import annotations

import argparse
from typing import Any

from fastmode.backends.predict import (
    PlacementOptions,
    PredictError,
    predict_placement,
    predict_tier,
)
from fastmode.backends.profiles import Catalog
from fastmode.backends.reasoning import EFFORTS
from fastmode.cli._common import UsageError, console, fmt_n, fmt_s, load_engine, print_json, table


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "predict",
        help="steady-state speed of a model on hardware, or of a tier of the config",
        description=(
            "Predict TTFT, inter-token latency and tokens/s. Either a placement (--model "
            "--hardware --chips [--precision] --batch) or a tier of the config (--tier)."
        ),
    )
    p.add_argument("--model", help="model profile (fastmode/backends/data/models.toml or the config)")
    p.add_argument("--hardware", help="hardware profile (fastmode/backends/data/hardware.toml)")
    p.add_argument("--chips", type=int, help="chips in one replica")
    p.add_argument("--precision", help="weight precision: bf16, fp16, fp8, int8, fp4 (NVFP4; "
                   "nvfp4), mxfp4 (default: the model's checkpoint, e.g. mxfp4 for gpt-oss)")
    p.add_argument("--batch", type=int, default=1, help="sequences decoding together")
    p.add_argument("--kv-precision", help="KV-cache precision (default: the model's, else the "
                   "weights'; fp8 halves KV bytes)")
    p.add_argument("--max-batch", type=int, default=256,
                   help="sequences a replica runs at once (placement; default 256)")
    p.add_argument("--engine", help="serving engine whose overheads, kernels and memory rule "
                   "apply (fastmode/backends/data/engines.toml: vllm, sglang, trtllm, ...); its time to "
                   "the first token is then in TTFT, as a benchmark of it measures")
    p.add_argument("--memory-fraction", type=float,
                   help="the engine's memory share (vLLM gpu_memory_utilization, TensorRT-LLM "
                   "kv_cache_free_gpu_mem_fraction, SGLang mem_fraction_static)")
    p.add_argument("--attention-dp", action="store_true",
                   help="attention data parallel: each chip its own sequences' attention and "
                   "KV (SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp)")
    p.add_argument("--expert-parallel", type=int, default=1, metavar="N",
                   help="spread the routed experts over N groups of chips (N divides --chips)")
    p.add_argument("--speculative", metavar="DRAFT",
                   help="speculative decoding with this draft model, or 'mtp' (the model's "
                   "own multi-token-prediction layer)")
    p.add_argument("--draft-tokens", type=int, default=4, help="tokens drafted per step (k)")
    p.add_argument("--acceptance", type=float, default=0.7,
                   help="per-token acceptance rate of the drafts (alpha, 0-1)")
    p.add_argument("--draft-chips", type=int, help="chips the draft runs on (default: all)")
    p.add_argument("--prefill-chips", type=int, metavar="N",
                   help="prefill/decode disaggregation: prompts on a separate replica of N "
                   "chips, the KV shipped to the decode replica (--chips)")
    p.add_argument("--arrivals", choices=["closed", "poisson"], default="closed",
                   help="closed: --batch users in a closed loop (default); poisson: open-loop "
                   "arrivals at --rate (fastmode simulate --json runs them with variable "
                   "lengths and several replicas)")
    p.add_argument("--rate", type=float, help="requests/s with --arrivals poisson")
    p.add_argument("--scheduler-recv-interval", type=int, default=1, metavar="N",
                   help="the engine takes new requests every N steps (SGLang's "
                   "--scheduler-recv-interval; default 1): a request waits (N - 1) / 2 steps "
                   "more for its first token")
    p.add_argument("--tier", help="a tier of the config, under its background load")
    p.add_argument("--config", help="config file (default: the built-in one)")
    p.add_argument("--prompt-tokens", type=int, default=2000)
    p.add_argument("--output-tokens", type=int, default=500)
    p.add_argument(
        "--max-batched-tokens", type=int, default=8192, help="per-step token budget (placement)"
    )
    p.add_argument(
        "--reasoning-effort", choices=[*EFFORTS, "all"],
        help="with --tier: the model thinks this long first (its median for the effort; 'all' "
        "prints every effort); the first visible token comes that many tokens later",
    )
    p.add_argument("--reasoning-tokens", type=int,
                   help="reasoning tokens before the visible reply (any mode)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    if args.reasoning_effort is not None and args.tier is None:
        raise UsageError("reasoning-effort: needs --tier (the tier's model says how long each "
                         "effort thinks); give --reasoning-tokens for a placement")
    if args.reasoning_effort is not None and args.reasoning_tokens is not None:
        raise UsageError("reasoning-tokens: give --reasoning-effort or --reasoning-tokens")
    if args.reasoning_tokens is not None and args.reasoning_tokens < 0:
        raise UsageError(f"reasoning-tokens: must be >= 0, got {args.reasoning_tokens}")
    if args.reasoning_effort == "all":
        return _effort_table(args)
    try:
        thought = _reasoning_tokens(args)
        out = _predict(args, thought)
    except PredictError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print_json(out)
    else:
        print_prediction(out)
    return 0


def _predict(args: argparse.Namespace, thought: int) -> dict[str, Any]:
    """The prediction of one request that thinks ``thought`` tokens before its visible reply:
    the engine generates them first at the tier's speed, so the first visible token is
    ``thought`` inter-token latencies after the first token."""
    visible = args.output_tokens
    args.output_tokens = visible + thought
    try:
        out = _predict_tier(args) if args.tier is not None else _predict_placement(args)
    finally:
        args.output_tokens = visible
    out["output_tokens"] = visible
    out["reasoning_effort"] = args.reasoning_effort
    out["reasoning_tokens"] = thought
    out["ttft_visible_s"] = out["ttft_s"] + thought * out["itl_s"]
    return out


def _reasoning_tokens(args: argparse.Namespace, effort: str | None = None) -> int:
    effort = effort or args.reasoning_effort
    if effort is None:
        return int(args.reasoning_tokens or 0)
    spec, _ = load_engine(args.config)
    if args.tier not in spec.tiers:
        raise UsageError(f"tier: unknown {args.tier!r}; allowed: {', '.join(sorted(spec.tiers))}")
    profile = spec.tiers[args.tier].behavior.reasoning
    if effort != "none" and not profile.enabled:
        raise UsageError(f"reasoning-effort: the model of tier {args.tier!r} does not reason "
                         "([behavior] reasoning = false)")
    return profile.median(effort)


def _effort_table(args: argparse.Namespace) -> int:
    """Visible TTFT at every effort the tier's model supports."""
    rows = []
    try:
        for effort in EFFORTS:
            args.reasoning_effort = effort
            rows.append(_predict(args, _reasoning_tokens(args, effort)))
    except (PredictError, UsageError) as exc:
        if not rows:
            raise UsageError(str(exc)) from None
    args.reasoning_effort = "all"
    if args.json:
        print_json({"tier": args.tier, "efforts": rows})
        return 0
    con = console()
    con.print(f"tier {args.tier}: time to the first visible token by reasoning effort "
              f"({args.prompt_tokens} in / {args.output_tokens} visible out)")
    t = table(["effort", "reasoning tokens", "TTFT (first token)", "visible TTFT", "end to end"])
    for o in rows:
        t.add_row(o["reasoning_effort"], f"{o['reasoning_tokens']:,}", fmt_s(o["ttft_s"]),
                  fmt_s(o["ttft_visible_s"]), fmt_s(o["e2e_s"]))
    con.print(t)
    return 0


def _predict_tier(args: argparse.Namespace) -> dict[str, Any]:
    stray = [f"--{n.replace('_', '-')}" for n in (
        "model", "hardware", "chips", "engine", "speculative", "prefill_chips", "rate")
        if getattr(args, n)]
    if stray:
        raise UsageError(f"tier: --tier cannot be combined with {', '.join(stray)}")
    spec, ref = load_engine(args.config)
    if args.tier not in spec.tiers:
        raise UsageError(f"tier: unknown {args.tier!r}; allowed: {', '.join(sorted(spec.tiers))}")
    return predict_tier(spec, args.tier, args.prompt_tokens, args.output_tokens, ref)


def _predict_placement(args: argparse.Namespace) -> dict[str, Any]:
    missing = [f"--{n}" for n in ("model", "hardware", "chips") if getattr(args, n) is None]
    if missing:
        raise UsageError(
            f"{missing[0].lstrip('-')}: required without --tier "
            f"(give --model, --hardware and --chips, or --tier)"
        )
    catalog = Catalog.builtin()
    if args.config is not None:
        from fastmode.gateway.config import load_config

        cfg = load_config(args.config)
        catalog = catalog.extend(cfg.hardware, cfg.models)
    return predict_placement(
        catalog,
        args.model,
        args.hardware,
        args.chips,
        args.precision,
        args.batch,
        args.prompt_tokens,
        args.output_tokens,
        args.max_batched_tokens,
        kv_precision=args.kv_precision,
        max_batch=args.max_batch,
        options=placement_options(args),
    )


def placement_options(args: argparse.Namespace) -> PlacementOptions:
    """The serving options of the flags; a usage error names the flag that is wrong."""
    if args.arrivals == "poisson" and args.rate is None:
        raise UsageError("rate: --arrivals poisson needs --rate (requests/s)")
    if args.rate is not None and args.arrivals != "poisson":
        raise UsageError("rate: give --arrivals poisson with --rate")
    for flag in ("expert_parallel", "draft_tokens", "scheduler_recv_interval"):
        if getattr(args, flag) < 1:
            raise UsageError(f"{flag.replace('_', '-')}: must be >= 1")
    return PlacementOptions(
        engine=args.engine, attention_dp=args.attention_dp,
        expert_parallel=args.expert_parallel, memory_fraction=args.memory_fraction,
        speculative=args.speculative, draft_tokens=args.draft_tokens,
        acceptance=args.acceptance, draft_chips=args.draft_chips,
        prefill_chips=args.prefill_chips, rate=args.rate,
        recv_interval=args.scheduler_recv_interval,
    )


def print_prediction(o: dict[str, Any]) -> None:
    """The human-readable form of a ``predict_tier`` / ``predict_placement`` result."""
    con = console()
    if o["mode"] == "tier":
        title = (
            f"tier {o['tier']}: {o['model']} on {o['chips']} x {o['hardware']} "
            f"({o['precision']}), batch {o['batch']} of {o['max_batch']} "
            f"({o['background_seqs']} background)"
        )
    else:
        load = (f"{o['rate']:g} req/s (Poisson)" if o.get("arrivals") == "poisson"
                else f"batch {o['batch']}")
        how = ", ".join(x for x in (
            o.get("engine") and f"engine {o['engine']}",
            o.get("attention_dp") and "attention DP",
            (o.get("expert_parallel") or 1) > 1 and f"EP {o['expert_parallel']}",
            o.get("speculative") and f"speculative {o['speculative']}",
            o.get("prefill_chips") and f"+ {o['prefill_chips']} prefill chips") if x)
        title = (
            f"{o['model']} on {o['chips']} x {o['hardware']} ({o['precision']}), {load}"
            + (f" ({how})" if how else "")
        )
    con.print(title)
    t = table(["", "value"])
    t.add_row("request", f"{o['prompt_tokens']} in / {o['output_tokens']} out")
    t.add_row("time to first token", fmt_s(o["ttft_s"]))
    if o.get("reasoning_tokens"):
        how = o["reasoning_effort"] or "given"
        t.add_row("reasoning tokens", f"{o['reasoning_tokens']:,} ({how})")
        t.add_row("time to first visible token", fmt_s(o["ttft_visible_s"]))
    t.add_row("inter-token latency", fmt_s(o["itl_s"]))
    t.add_row("end to end", fmt_s(o["e2e_s"]))
    t.add_row("output tok/s per user", fmt_n(o["output_tokens_per_s_per_user"]))
    t.add_row("output tok/s total", fmt_n(o["output_tokens_per_s_total"]))
    t.add_row("bound", o["bound"])
    t.add_row("weights", f"{o['weights_gb']:.1f} GB of {o['usable_memory_gb']:.1f} GB usable")
    t.add_row("KV capacity", f"{o['kv_capacity_tokens']:,} tokens")
    if o["mode"] == "tier":
        pr = o["prices_usd_per_million_tokens"]
        t.add_row(
            "price $/M tokens",
            f"{pr['input']:.2f} in / {pr['cached_input']:.2f} cached / {pr['output']:.2f} out",
        )
        how = "derived" if o["price_derived"] else "configured"
        t.add_row(f"price factor ({how})", f"{o['price_factor']:.2f}x {o['reference_tier']}")
        t.add_row("hardware cost factor", f"{o['hardware_cost_factor']:.2f}x")
    t.add_row("hardware $/M output tokens", f"{o['hardware_usd_per_million_output_tokens']:.2f}")
    con.print(t)
    con.print("\nstep breakdown (one decode step of the batch above)")
    b = table(["term", "time"])
    for k, v in o["step_breakdown_s"].items():
        b.add_row(k.removesuffix("_s"), fmt_s(v))
    con.print(b)
