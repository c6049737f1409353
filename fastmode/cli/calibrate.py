"""``fastmode calibrate``: fit a deployment's efficiencies to your own server's measurements.

Run ``fastmode bench --concurrency C --json OUT`` against the real server (a few concurrency
levels, one JSON each), then::

    fastmode calibrate --measurements c1.json c8.json --model llama-3.1-70b \\
        --hardware h100-sxm --chips 2 --precision fp8 [--out profile.toml]

Each report gives three figures per tier: the median time to first token, the mean time per
output token (ITL) and the aggregate output tokens/s, at the report's concurrency (closed loop;
an open-loop report's concurrency is requests/s x mean end-to-end latency, Little's law) and its
mean prompt and output lengths. The hardware profile's efficiencies (``--fit``) are fitted to
them (``backends.calibrate.fit_hardware``: coordinate search on the squared log errors, a weak
pull towards the profile's shipped values), predicted and measured are printed per figure, and
a ``[hardware.NAME]`` TOML fragment with the fitted values is written (``--out``) for a config
passed to ``fastmode serve --config``. See docs/calibration.md.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from fastmode.backends.calibrate import (
    EFFICIENCIES,
    FIT_PARAMS,
    Figure,
    Result,
    error_stats,
    evaluate,
    fit_hardware,
    profile_fragment,
    with_params,
)
from fastmode.backends.profiles import Catalog, ProfileError, bytes_per_param

USER_PRIOR_WEIGHT = 0.002  # your measurements dominate; the pull only pins what they leave open
DEFAULT_FIT = ",".join(n for n in EFFICIENCIES if n != "mfu_fp8")


class UsageError(Exception):
    """Bad command-line input or measurement file: one line naming the option or field."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="fit a hardware profile's efficiencies to `fastmode bench --json` reports",
        description=(
            "Fit the efficiencies of a deployment (model on chips of a hardware profile) to "
            "TTFT, ITL and throughput measured by `fastmode bench --json` at one or more "
            "concurrency levels; print predicted vs measured and write a [hardware.NAME] "
            "profile fragment."
        ),
    )
    p.add_argument("--measurements", nargs="+", required=True, metavar="FILE",
                   help="`fastmode bench --json` reports (one per concurrency level)")
    p.add_argument("--model", required=True, help="model profile of the deployment")
    p.add_argument("--hardware", required=True, help="hardware profile to start from")
    p.add_argument("--chips", type=int, required=True, help="chips in one replica")
    p.add_argument("--precision", required=True, help="weight precision (bf16, fp8, ...)")
    p.add_argument("--kv-precision", help="KV cache precision (default: the model's)")
    p.add_argument("--tier", help="the tier of the reports to use (needed if several)")
    p.add_argument("--config", help="config file whose [hardware]/[models] profiles to add")
    p.add_argument("--max-batch", type=int, default=256,
                   help="the server's running-sequence limit (default 256)")
    p.add_argument("--max-batched-tokens", type=int, default=8192,
                   help="the server's per-step token budget (default 8192)")
    p.add_argument("--fit", default=DEFAULT_FIT,
                   help=f"comma-separated profile fields to fit (default {DEFAULT_FIT}; "
                        f"allowed: {', '.join(FIT_PARAMS)})")
    p.add_argument("--name", help="name of the fitted profile (default HARDWARE-calibrated)")
    p.add_argument("--out", help="write the [hardware.NAME] TOML fragment to this file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_calibrate)


def _catalog(config: str | None) -> Catalog:
    catalog = Catalog.builtin()
    if config is None:
        return catalog
    from fastmode.gateway.config import load_config

    cfg = load_config(config)
    return catalog.extend(cfg.hardware, cfg.models)


def _number(doc: dict[str, Any], path: str, where: str) -> float | None:
    cur: Any = doc
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    if cur is None:
        return None
    if not isinstance(cur, int | float) or isinstance(cur, bool) or not math.isfinite(cur):
        raise UsageError(f"{where}: {path} is not a number")
    return float(cur)


def figures_from_report(
    doc: dict[str, Any], where: str, *, model: str, hardware: str, chips: int,
    precision: str, kv_precision: str | None, tier: str | None, max_batch: int,
    max_batched_tokens: int,
) -> list[Figure]:
    """TTFT (median), ITL (mean TPOT) and output tokens/s of one bench report, as figures."""
    if not isinstance(doc, dict) or "fastmode_bench" not in doc or "tiers" not in doc:
        raise UsageError(f"{where}: not a `fastmode bench --json` report (no fastmode_bench/tiers)")
    tiers = doc["tiers"]
    if not isinstance(tiers, dict) or not tiers:
        raise UsageError(f"{where}: tiers: the report has no tier")
    if tier is None:
        if len(tiers) > 1:
            raise UsageError(
                f"--tier: {where} has several tiers ({', '.join(sorted(tiers))}); name one"
            )
        tier = next(iter(tiers))
    if tier not in tiers:
        raise UsageError(f"--tier: {where} has no tier {tier!r}; it has {', '.join(sorted(tiers))}")
    t = tiers[tier]
    ok = _number(t, "ok", where) or 0.0
    requests = _number(t, "requests", where) or 0.0
    if ok < 1:
        raise UsageError(f"{where}: tier {tier!r} has no successful request")
    prompt = (_number(t, "prompt_tokens", where) or 0.0) / ok
    output = (_number(t, "output_tokens", where) or 0.0) / max(requests, ok)
    params = doc.get("params", {}) if isinstance(doc.get("params"), dict) else {}
    conc = params.get("concurrency")
    if isinstance(conc, int) and conc > 0:
        concurrency = conc
    else:  # open loop: Little's law
        rps = _number(t, "requests_per_s", where)
        e2e = _number(t, "e2e_s.mean", where)
        if not rps or not e2e:
            raise UsageError(f"{where}: no concurrency and no requests_per_s/e2e to derive it")
        concurrency = max(1, round(rps * e2e))
    if prompt < 1 or output < 2:
        raise UsageError(
            f"{where}: tier {tier!r} has prompts of {prompt:.0f} and outputs of {output:.0f} "
            f"tokens on average; need a prompt and at least 2 output tokens"
        )
    base: dict[str, Any] = dict(
        source=Path(where).name, model=model, hardware=hardware, chips=chips,
        precision=precision, kv_precision=kv_precision, scenario="serving",
        batch=int(concurrency), prompt_tokens=max(1, round(prompt)),
        output_tokens=max(2, round(output)), max_batch=max_batch,
        max_batched_tokens=max_batched_tokens, engine="measured", where=where,
    )
    out: list[Figure] = []
    for metric, path, unit in (("ttft", "ttft_s.p50", "s"), ("itl", "tpot_s.mean", "s"),
                               ("throughput", "output_tokens_per_s", "tok/s")):
        v = _number(t, path, where)
        if v is not None and v > 0:
            fid = f"{Path(where).name}/{tier}/c{concurrency}/{metric}"
            out.append(Figure(id=fid, metric=metric, value=v, unit=unit, **base))
    if not out:
        raise UsageError(f"{where}: tier {tier!r} has no TTFT, TPOT or throughput figure")
    return out


def cmd_calibrate(args: argparse.Namespace) -> int:
    catalog = _catalog(args.config)
    try:
        catalog.get_model(args.model)
        hw = catalog.get_hardware(args.hardware)
        bytes_per_param(args.precision)
        if args.kv_precision is not None:
            bytes_per_param(args.kv_precision)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    if args.chips <= 0:
        raise UsageError(f"--chips: must be > 0, got {args.chips}")
    names = [n.strip() for n in args.fit.split(",") if n.strip()]
    bad = [n for n in names if n not in FIT_PARAMS]
    if bad or not names:
        raise UsageError(f"--fit: unknown {', '.join(bad) or '(none)'}; "
                         f"allowed: {', '.join(FIT_PARAMS)}")
    figures: list[Figure] = []
    for path in args.measurements:
        try:
            doc = json.loads(Path(path).read_text("utf-8"))
        except OSError as exc:
            raise UsageError(f"--measurements: cannot read {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"--measurements: {path} is not JSON ({exc.msg})") from None
        figures.extend(figures_from_report(
            doc, path, model=args.model, hardware=hw.name, chips=args.chips,
            precision=args.precision, kv_precision=args.kv_precision, tier=args.tier,
            max_batch=args.max_batch, max_batched_tokens=args.max_batched_tokens,
        ))
    before = evaluate(figures, catalog)
    if any(r.predicted is None for r in before):
        raise UsageError(
            f"--model: {args.model} does not fit {args.chips} x {hw.name} at {args.precision}"
        )
    prior = {n: _value(hw, n) for n in FIT_PARAMS}
    weights = {f.id: 1.0 for f in figures}
    fitted = fit_hardware(hw, figures, catalog, prior, names, weights,
                          prior_weight=USER_PRIOR_WEIGHT)
    changed = {n: fitted.values[n] for n in fitted.params}
    new_hw = with_params(hw, changed)
    after_cat = Catalog({**catalog.hardware, hw.name: new_hw}, catalog.models)
    after = evaluate(figures, after_cat)
    name = args.name or f"{hw.name}-calibrated"
    comment = (f"fitted by `fastmode calibrate` from {', '.join(args.measurements)}\n"
               f"({args.model} on {args.chips} x {hw.name} at {args.precision}; "
               f"fitted: {', '.join(fitted.params)})")
    fragment = profile_fragment(name, hw, changed, comment)
    if args.out:
        Path(args.out).write_text(fragment, "utf-8")
    if args.json:
        print(json.dumps(_doc(hw.name, name, prior, changed, before, after, args.out),
                         indent=2))
    else:
        _print(hw.name, prior, changed, before, after, fragment, args.out)
    return 0


def _value(hw: Any, name: str) -> float:
    v = getattr(hw, name)
    if v is None:  # mbu_kv / mfu_fp8 default to mbu / mfu
        return float(hw.mbu if name == "mbu_kv" else hw.mfu)
    return float(v)


def _rows(before: list[Result], after: list[Result]) -> list[dict[str, Any]]:
    return [{"figure": a.figure.id, "metric": a.figure.metric, "concurrency": a.figure.batch,
             "unit": a.figure.unit, "measured": a.figure.value, "predicted_before": b.predicted,
             "predicted_after": a.predicted, "error_before": b.error, "error_after": a.error}
            for b, a in zip(before, after, strict=True)]


def _doc(base: str, name: str, prior: dict[str, float], changed: dict[str, float],
         before: list[Result], after: list[Result], out: str | None) -> dict[str, Any]:
    return {
        "base_hardware": base, "profile": name,
        "fitted": {k: {"before": prior[k], "after": v, "ratio": v / prior[k] if prior[k] else None}
                   for k, v in changed.items()},
        "figures": _rows(before, after),
        "median_abs_error_before": error_stats(before).median_abs,
        "median_abs_error_after": error_stats(after).median_abs,
        "out": out,
    }


def _print(base: str, prior: dict[str, float], changed: dict[str, float],
           before: list[Result], after: list[Result], fragment: str, out: str | None) -> None:
    print(f"{'figure':40s} {'measured':>10} {'before':>10} {'after':>10} {'error':>7}")
    for b, a in zip(before, after, strict=True):
        scale = 1000.0 if a.figure.unit == "s" else 1.0
        unit = "ms" if a.figure.unit == "s" else a.figure.unit
        pb = "-" if b.predicted is None else f"{b.predicted * scale:.4g}"
        pa = "-" if a.predicted is None else f"{a.predicted * scale:.4g}"
        err = "-" if a.error is None else f"{100 * a.error:+.1f}%"
        label = f"{a.figure.metric} c={a.figure.batch} ({unit})"
        print(f"{label:40s} {a.figure.value * scale:>10.4g} {pb:>10} {pa:>10} {err:>7}")
    print(f"\nmedian |error|: {100 * error_stats(before).median_abs:.1f}% with {base}, "
          f"{100 * error_stats(after).median_abs:.1f}% fitted")
    for k, v in changed.items():
        print(f"  {k:24s} {prior[k]:10.4g} -> {v:10.4g}  ({v / prior[k]:.3f}x)"
              if prior[k] else f"  {k:24s} {prior[k]:10.4g} -> {v:10.4g}")
    if out:
        print(f"\nprofile fragment written to {out}")
    else:
        print("\n" + fragment)
