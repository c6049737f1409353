"""``fastmode predict`` and ``fastmode simulate``: the physics and the scheduler from a terminal.

Registered into the ``fastmode`` command by ``gateway/cli.py``, which turns ``UsageError``,
``ProfileError`` and ``ConfigError`` into a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from .engine import EngineSpec, build
from .predict import PredictError, predict_placement, predict_tier
from .profiles import Catalog, ProfileError
from .simulate import DIST_KINDS, LengthDist, Workload, WorkloadError, simulate

DEFAULT_MIX = {"standard": 0.7, "fast": 0.2, "spark": 0.1}


class UsageError(Exception):
    """Bad command-line input: a one-line message naming the option and what is allowed."""


# ---------------------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "predict",
        help="steady-state speed of a model on hardware, or of a tier of the config",
        description=(
            "Predict TTFT, inter-token latency and tokens/s. Either a placement (--model "
            "--hardware --chips [--precision] --batch) or a tier of the config (--tier)."
        ),
    )
    p.add_argument("--model", help="model profile (backends/data/models.toml or the config)")
    p.add_argument("--hardware", help="hardware profile (backends/data/hardware.toml)")
    p.add_argument("--chips", type=int, help="chips in one replica")
    p.add_argument("--precision", default="bf16", help="weight precision (default bf16)")
    p.add_argument("--batch", type=int, default=1, help="sequences decoding together")
    p.add_argument("--tier", help="a tier of the config, under its background load")
    p.add_argument("--config", help="config file (default: the built-in one)")
    p.add_argument("--prompt-tokens", type=int, default=2000)
    p.add_argument("--output-tokens", type=int, default=500)
    p.add_argument(
        "--max-batched-tokens", type=int, default=8192, help="per-step token budget (placement)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_predict)

    s = subparsers.add_parser(
        "simulate",
        help="run a workload on the configured tiers in virtual time",
        description=(
            "Generate a workload (open loop at --rate, or closed loop with --concurrency users), "
            "run it in virtual time and print latency percentiles, throughput, batch occupancy "
            "and cost per tier."
        ),
    )
    s.add_argument("--config", help="config file (default: the built-in one)")
    load = s.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="open loop: requests per second (default 1)")
    load.add_argument("--concurrency", type=int, help="closed loop: concurrent users")
    s.add_argument(
        "--duration", type=float, help="seconds of arrivals (default 60; unbounded with --requests)"
    )
    s.add_argument("--requests", type=int, help="stop after this many requests")
    s.add_argument("--prompt-tokens", type=int, default=2000, help="mean prompt length")
    s.add_argument("--output-tokens", type=int, default=500, help="mean output length")
    s.add_argument("--prompt-dist", default="fixed", help=f"one of {', '.join(DIST_KINDS)}")
    s.add_argument("--output-dist", default="fixed", help=f"one of {', '.join(DIST_KINDS)}")
    s.add_argument(
        "--mix", help="tier shares, e.g. standard=0.7,fast=0.2,spark=0.1 (the default)"
    )
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--arrivals", default="poisson", help="open loop: poisson or constant")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_simulate)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def load_engine(path: str | None) -> tuple[EngineSpec, str]:
    """The engine built from a config file (or the default) and its reference tier."""
    from gateway.config import load_config

    cfg = load_config(path)
    try:
        spec = build(cfg.sim())
    except ProfileError:
        raise
    except ValueError as exc:
        raise UsageError(f"config: {exc}") from None
    return spec, cfg.pricing.reference_tier


def _clean(obj: Any) -> Any:
    """JSON-safe: non-finite floats become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _print_json(obj: dict[str, Any]) -> None:
    print(json.dumps(_clean(obj), indent=2, allow_nan=False))


def fmt_s(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if x < 1.0:
        return f"{x * 1e3:.3g} ms"
    return f"{x:.3g} s"


def fmt_n(x: float | None, digits: int = 1) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.{digits}f}"


def _console() -> Any:
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


def _table(columns: list[str]) -> Any:
    from rich.table import Table

    t = Table(show_edge=False, pad_edge=False)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=True)
    return t


# ---------------------------------------------------------------------------------------------
# predict
# ---------------------------------------------------------------------------------------------


def cmd_predict(args: argparse.Namespace) -> int:
    try:
        if args.tier is not None:
            stray = [f"--{n}" for n in ("model", "hardware", "chips") if getattr(args, n)]
            if stray:
                raise UsageError(f"tier: --tier cannot be combined with {', '.join(stray)}")
            spec, ref = load_engine(args.config)
            if args.tier not in spec.tiers:
                raise UsageError(
                    f"tier: unknown {args.tier!r}; allowed: {', '.join(sorted(spec.tiers))}"
                )
            out = predict_tier(spec, args.tier, args.prompt_tokens, args.output_tokens, ref)
        else:
            missing = [f"--{n}" for n in ("model", "hardware", "chips") if getattr(args, n) is None]
            if missing:
                raise UsageError(
                    f"{missing[0].lstrip('-')}: required without --tier "
                    f"(give --model, --hardware and --chips, or --tier)"
                )
            catalog = Catalog.builtin()
            if args.config is not None:
                from gateway.config import load_config

                cfg = load_config(args.config)
                catalog = catalog.extend(cfg.hardware, cfg.models)
            out = predict_placement(
                catalog,
                args.model,
                args.hardware,
                args.chips,
                args.precision,
                args.batch,
                args.prompt_tokens,
                args.output_tokens,
                args.max_batched_tokens,
            )
    except PredictError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        _print_json(out)
    else:
        _print_prediction(out)
    return 0


def _print_prediction(o: dict[str, Any]) -> None:
    con = _console()
    if o["mode"] == "tier":
        title = (
            f"tier {o['tier']}: {o['model']} on {o['chips']} x {o['hardware']} "
            f"({o['precision']}), batch {o['batch']} of {o['max_batch']} "
            f"({o['background_seqs']} background)"
        )
    else:
        title = (
            f"{o['model']} on {o['chips']} x {o['hardware']} ({o['precision']}), "
            f"batch {o['batch']}"
        )
    con.print(title)
    t = _table(["", "value"])
    t.add_row("request", f"{o['prompt_tokens']} in / {o['output_tokens']} out")
    t.add_row("time to first token", fmt_s(o["ttft_s"]))
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
        t.add_row(
            f"price factor ({how})", f"{o['price_factor']:.2f}x {o['reference_tier']}"
        )
        t.add_row("hardware cost factor", f"{o['hardware_cost_factor']:.2f}x")
    t.add_row("hardware $/M output tokens", f"{o['hardware_usd_per_million_output_tokens']:.2f}")
    con.print(t)
    con.print("\nstep breakdown (one decode step of the batch above)")
    b = _table(["term", "time"])
    for k, v in o["step_breakdown_s"].items():
        b.add_row(k.removesuffix("_s"), fmt_s(v))
    con.print(b)


# ---------------------------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------------------------


def parse_mix(text: str | None, tiers: dict[str, Any]) -> dict[str, float]:
    if text is None:
        if all(n in tiers for n in DEFAULT_MIX):
            return dict(DEFAULT_MIX)
        return {n: 1.0 for n in tiers}
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, sep, share = part.strip().partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"mix: expected TIER=SHARE[,TIER=SHARE...], got {text!r}")
        if name not in tiers:
            raise UsageError(f"mix: unknown tier {name!r}; allowed: {', '.join(sorted(tiers))}")
        try:
            value = float(share)
        except ValueError:
            raise UsageError(f"mix: share of {name!r} is not a number: {share!r}") from None
        if not value >= 0 or not math.isfinite(value):
            raise UsageError(f"mix: share of {name!r} must be >= 0, got {share}")
        mix[name] = value
    if sum(mix.values()) <= 0:
        raise UsageError("mix: the shares add up to 0")
    return mix


def _workload(args: argparse.Namespace, spec: EngineSpec) -> Workload:
    for flag in ("prompt_tokens", "output_tokens"):
        v = getattr(args, flag)
        if v <= 0:
            raise UsageError(f"{flag.replace('_', '-')}: must be > 0, got {v}")
    for flag in ("prompt_dist", "output_dist"):
        v = getattr(args, flag)
        if v not in DIST_KINDS:
            raise UsageError(
                f"{flag.replace('_', '-')}: unknown {v!r}; allowed: {', '.join(DIST_KINDS)}"
            )
    mix = parse_mix(args.mix, spec.tiers)
    if args.prompt_dist == "fixed":
        for name, share in mix.items():
            window = spec.tiers[name].context_window
            if share > 0 and args.prompt_tokens >= window:
                raise UsageError(
                    f"prompt-tokens: {args.prompt_tokens} does not fit the context window of "
                    f"tier {name} ({window} tokens)"
                )
    rate = args.rate
    if rate is None and args.concurrency is None:
        rate = 1.0
    duration = args.duration
    if duration is None:
        duration = math.inf if args.requests is not None else 60.0
    try:
        return Workload(
            mix=mix,
            prompt=LengthDist(args.prompt_dist, args.prompt_tokens),
            output=LengthDist(args.output_dist, args.output_tokens),
            rate=rate,
            concurrency=args.concurrency,
            duration=duration,
            requests=args.requests,
            arrivals=args.arrivals,
            seed=args.seed,
        )
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None


def cmd_simulate(args: argparse.Namespace) -> int:
    spec, _ref = load_engine(args.config)
    wl = _workload(args, spec)
    try:
        result = simulate(spec, wl)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        _print_json(result.to_dict())
        return 0
    print_simulation(result.to_dict())
    run = result.run
    print(
        f"simulated {run['simulated_s']:.1f} s in {run['wall_s']:.2f} s of wall time; "
        f"{run['steps']:,} scheduler steps ({fmt_n(run['steps_per_s'], 0)} steps/s)",
        file=sys.stderr,
    )
    return 0


def print_simulation(res: dict[str, Any]) -> None:
    """Per-tier table of a ``SimResult.to_dict()``: metrics as rows, tiers as columns."""
    tiers: dict[str, dict[str, Any]] = res["tiers"]
    run = res["run"]
    names = list(tiers)
    load = (
        f"{run['rate']:g} req/s open loop"
        if run["mode"] == "open"
        else f"{run['concurrency']} users closed loop"
    )
    con = _console()
    con.print(f"simulate: {load}, seed {run['seed']}")
    t = _table(["", *names])

    def row(label: str, f: Any) -> None:
        t.add_row(label, *(f(tiers[n]) for n in names))

    row("requests", lambda d: f"{d['requests']:,}")
    row("completed", lambda d: f"{d['completed']:,}")
    row(
        "rejected",
        lambda d: f"{d['rejected']:,}"
        + (
            " (" + ", ".join(f"{k} {v}" for k, v in d["rejected_by_reason"].items()) + ")"
            if d["rejected"]
            else ""
        ),
    )
    for key, label in (("ttft_s", "TTFT"), ("itl_s", "ITL"), ("e2e_s", "end to end")):
        for q in ("p50", "p90", "p99"):
            row(f"{label} {q}", lambda d, key=key, q=q: fmt_s(d[key][q]))
    row("tok/s per user p50", lambda d: fmt_n(d["output_tokens_per_s_per_user_p50"]))
    row("output tok/s (all users)", lambda d: fmt_n(d["output_tokens_per_s"]))
    row(
        "mean batch / max (bg)",
        lambda d: f"{d['mean_batch']:.1f} / {d['max_batch']} ({d['background_seqs']})",
    )
    row("cost USD", lambda d: f"{d['cost_usd']:,.2f}")
    con.print(t)
    print(
        f"total: {run['requests']:,} requests, {run['rejected']:,} rejected, "
        f"${run['cost_usd']:,.2f} over {run['simulated_s']:.1f} simulated s"
    )
