"""Score chosen published figures with the shipped profiles (no fit) and show why.

A full calibration run refits every fold (tens of minutes); diagnosing a block of bad figures
needs only the shipped profiles' prediction of those figures and the model's own account of
it: the batch reached, the KV capacity behind it, one decode step split into its terms
(weights, GEMMs, attention, the layer floor, collectives, host work), the waves of an offline
run. A hypothesis ("the grouped GEMMs are slower", "the KV cache is bf16") is then scored by
changing one term or one condition and printing the same figures again, the fit untouched
(docs/calibration.md).

    python -m bench.score_figures --source trtllm-perf-overview-v12
    python -m bench.score_figures --match qwen3 --set hw.expert_compute_efficiency=0.5
    python -m bench.score_figures --source trtllm-perf-overview-v12 --set fig.kv_precision=bf16
    python -m bench.score_figures --extra figs.toml --breakdown   # figures not in the set

``--set`` takes ``hw.FIELD=V`` (every hardware profile, after the engine's terms are applied),
``engine.FIELD=V`` (every engine profile) or ``fig.FIELD=V`` (the chosen figures'
conditions); repeat it to combine. ``--breakdown`` prints one decode step of each figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastmode.backends.calibrate import figures as figmod
from fastmode.backends.calibrate.engines import Engines, load_engines
from fastmode.backends.calibrate.figures import Figure, load_figures, load_published
from fastmode.backends.calibrate.scope import is_fitted
from fastmode.backends.perf import Placement
from fastmode.backends.profiles import Catalog, ProfileError


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def parse_sets(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``hw.F=V`` / ``engine.F=V`` / ``fig.F=V`` into {"hw": {F: V}, ...}."""
    out: dict[str, dict[str, Any]] = {"hw": {}, "engine": {}, "fig": {}}
    for item in items:
        key, sep, val = item.partition("=")
        scope, dot, name = key.partition(".")
        if not sep or not dot or scope not in out:
            raise SystemExit(f"--set {item!r}: want hw.FIELD=V, engine.FIELD=V or fig.FIELD=V")
        out[scope][name] = _value(val)
    return out


def chosen(figs: Sequence[Figure], sources: Sequence[str], match: Sequence[str]) -> list[Figure]:
    return [f for f in figs
            if (not sources or f.source in sources) and all(m in f.id for m in match)]


@contextmanager
def hw_overrides(hw_sets: dict[str, Any]) -> Iterator[None]:
    """Apply ``hw.*`` overrides to every placement the figures module builds (after the
    engine's terms, so they win over both), and restore it afterwards."""
    original = figmod.placement

    def patched(fig: Figure, catalog: Catalog, engines: Engines | None = None) -> Placement:
        p = original(fig, catalog, engines)
        return dataclasses.replace(p, hardware=dataclasses.replace(p.hardware, **hw_sets))

    if hw_sets:
        figmod.placement = patched
    try:
        yield
    finally:
        figmod.placement = original


def breakdown(fig: Figure, catalog: Catalog, engines: Engines) -> str:
    """The model's account of a figure: batch, KV capacity, waves, one mid-run decode step."""
    p = figmod.placement(fig, catalog, engines)
    w = figmod.workload(fig, catalog, engines)
    b = w.running
    ctx = fig.prompt_tokens + fig.output_tokens / 2
    st = p.step(b, b * ctx)
    parts = " ".join(f"{k[:-2]} {v * 1e3:.2f}" for k, v in st.breakdown.items() if v)
    cap = p.kv_capacity_tokens
    fits = cap // (fig.prompt_tokens + fig.output_tokens)
    waves = ""
    if fig.requests and figmod.is_offline_waves(fig):
        full, rest = divmod(fig.requests, b)
        waves = f" waves {full}+{1 if rest else 0} (last {rest})"
    return (f"    batch {b} (fits {fits}, max {fig.max_batch}) kv {cap / 1e6:.2f}M tok{waves}; "
            f"decode step {st.total_s * 1e3:.2f} ms [{st.bound}]: {parts} (ms); "
            f"tok/s/chip at that step {b / st.total_s / fig.chips:.0f}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append", default=[], help="a source id (repeatable)")
    ap.add_argument("--match", action="append", default=[],
                    help="a substring every chosen figure id contains (repeatable)")
    ap.add_argument("--extra", type=Path, help="a TOML of [[figures]] to score instead")
    ap.add_argument("--set", action="append", default=[], dest="sets",
                    help="hw.FIELD=V, engine.FIELD=V or fig.FIELD=V (repeatable)")
    ap.add_argument("--breakdown", action="store_true", help="the model's account per figure")
    args = ap.parse_args(argv)
    sets = parse_sets(args.sets)
    if args.extra:
        _, figs = load_figures(args.extra.read_text("utf-8"))
    else:
        _, figs = load_published()
    figs = chosen(figs, args.source, args.match)
    if not figs:
        raise SystemExit("no figure chosen")
    catalog = Catalog.builtin()
    engines = {n: dataclasses.replace(e, **sets["engine"]) for n, e in load_engines().items()}
    with hw_overrides(sets["hw"]):
        errors = score(figs, catalog, engines, sets["fig"], args.breakdown)
    if errors:
        print(f"{len(errors)} figures: median |error| "
              f"{100 * statistics.median(abs(e) for e in errors):.1f}%, signed median "
              f"{100 * statistics.median(errors):+.1f}%")
    return 0


def score(figs: Sequence[Figure], catalog: Catalog, engines: Engines,
          fig_sets: dict[str, Any], show_breakdown: bool) -> list[float]:
    """Print each figure's measured, predicted and error (and the model's account of it);
    return the errors of the figures predicted."""
    errors = []
    print(f"{'measured':>10} {'predicted':>10} {'error':>7}  figure (* scored, not fitted)")
    for f in figs:
        f = dataclasses.replace(f, **fig_sets)
        try:
            pred = figmod.predict_figure(f, catalog, engines)
        except ProfileError as exc:
            print(f"{f.value:10.4g} {'refused':>10}          {f.id}: {exc}")
            continue
        if pred is None:
            print(f"{f.value:10.4g} {'refused':>10}          {f.id}")
            continue
        err = pred / f.value - 1
        errors.append(err)
        mark = "" if is_fitted(f, catalog) else " *"
        print(f"{f.value:10.4g} {pred:10.4g} {100 * err:+6.1f}%  {f.id}{mark}")
        if show_breakdown:
            print(breakdown(f, catalog, engines))
    return errors


if __name__ == "__main__":
    raise SystemExit(main())
