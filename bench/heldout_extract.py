"""Extract the held-out InferenceMAX runs once into bench/data/heldout_inferencemax.toml.

The held-out figures judge the performance model from outside its fit (docs/calibration.md,
"How good it is"): SemiAnalysis InferenceMAX's DeepSeek-R1 runs (every GPU, SGLang and ATOM)
and its B200 TensorRT-LLM gpt-oss runs. They are never added to the calibration set
(fastmode/backends/data/measurements/published.toml), so they never enter the fit or the
cross-validation; ``bench/heldout.py`` scores them with ``fastmode predict``.

The source is the InferenceMAX artifacts (``agg_bmk.json`` of each GitHub Actions run) as
archived, unmodified, in the gminneci/mantile repository (``reconcile/sources/inferencemax/raw``
at commit 1d3c259c, the archive the calibration set's ``inferencemax-gptoss`` source cites).
Kept: runs that are not disaggregated, not multinode and without speculative decoding (what
``predict`` computes), of a DeepSeek model or on ``b200-trt``. A configuration measured by
several runs keeps the latest run's figures. The top-level ``agg_bmk.json`` (no run id, the
same entries as run 21012127808) is not read.

Run once, from a checkout of the archive (no network here):

    git clone https://github.com/gminneci/mantile && git -C mantile checkout 1d3c259c
    python bench/heldout_extract.py mantile/reconcile/sources/inferencemax/raw
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "data" / "heldout_inferencemax.toml"
ARCHIVE = ("https://github.com/gminneci/mantile/tree/1d3c259c926ecce3322c9ceface7e2f00f2de7e6/"
           "reconcile/sources/inferencemax/raw")
# the artifact's fields kept per run: its conditions, then the three figures scored
CONDITIONS = ("hw", "framework", "image", "model", "precision", "isl", "osl", "tp", "ep",
              "dp_attention", "conc")
FIGURES = ("median_ttft", "mean_tpot", "output_tput_per_gpu")

HEADER = """\
# HELD-OUT figures (docs/calibration.md, "How good it is"): SemiAnalysis
# InferenceMAX's DeepSeek-R1 runs (H200, B200, MI300X, MI325X, MI355X; SGLang and ATOM) and its
# B200 TensorRT-LLM gpt-oss runs. They are NOT in fastmode/backends/data/measurements/published.toml and
# never enter the fit or the cross-validation: they judge the model from outside.
# `python bench/heldout.py` scores them through `fastmode predict`.
#
# Source: the InferenceMAX sweep artifacts (agg_bmk.json of each GitHub Actions run of
# https://github.com/InferenceMAX/InferenceMAX), as archived unmodified in
# {archive}
# Written by `python bench/heldout_extract.py` (which runs are kept, and why: its docstring).
# One run per configuration (the latest run id wins); values copied as published, in the
# artifact's units (seconds, tokens/s per GPU).
#
# Run conditions, from the artifact and the sweep's harness (as for the calibration set's
# `inferencemax-gptoss` source): a closed loop of `conc` users on one replica of `tp` GPUs,
# `ep` expert-parallel ranks, attention data parallelism when dp_attention; prompt and output
# lengths drawn uniformly from [0.8 x isl, isl] and [0.8 x osl, osl] (--random-range-ratio
# 0.8, the sweep's default), 10 x conc requests; the engine and its version are the `image`;
# `precision` is the sweep's label (fp8: the FP8 checkpoint; fp4: NVIDIA's NVFP4 checkpoint,
# AMD's MXFP4 one, or gpt-oss's released MXFP4 experts). Figures: median_ttft (s), mean_tpot
# (s per output token after the first), output_tput_per_gpu (output tokens/s per GPU).
"""


def selected(entry: dict[str, Any]) -> bool:
    """A held-out run that ``predict`` can take: aggregated, one node, no speculation."""
    if entry.get("disagg") or entry.get("is_multinode"):
        return False
    if entry.get("spec_decoding", "none") != "none":
        return False
    return "DeepSeek" in str(entry.get("model", "")) or entry.get("hw") == "b200-trt"


def collect(raw: Path) -> list[dict[str, Any]]:
    """The kept runs of every ``run_<id>/agg_bmk.json`` under ``raw``, latest run first wins."""
    runs: dict[tuple[Any, ...], dict[str, Any]] = {}
    files = sorted(raw.glob("run_*/agg_bmk.json"), key=lambda p: int(p.parent.name[4:]))
    for path in files:
        run_id = int(path.parent.name[4:])
        for entry in json.loads(path.read_text("utf-8")):
            if not selected(entry):
                continue
            row = {"run": run_id, **{k: entry.get(k) for k in CONDITIONS},
                   **{k: entry[k] for k in FIGURES}}
            row["dp_attention"] = str(row["dp_attention"]).lower() == "true"
            row["ep"] = int(row["ep"] or 1)
            key = tuple(row[k] for k in CONDITIONS if k != "image")
            runs[key] = row  # a later run of the same configuration replaces an earlier one
    return sorted(runs.values(), key=lambda r: (str(r["model"]), r["hw"], r["framework"],
                                                 r["precision"], r["isl"], r["osl"], r["tp"],
                                                 r["ep"], r["dp_attention"], r["conc"]))


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a TOML basic string is a JSON string for these values


def render(runs: list[dict[str, Any]]) -> str:
    lines = [HEADER.format(archive=ARCHIVE), "schema = 1", f"archive = {toml_value(ARCHIVE)}",
             "runs = ["]
    for r in runs:
        body = ", ".join(f"{k} = {toml_value(v)}" for k, v in r.items())
        lines.append(f"  {{{body}}},")
    lines.append("]")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path, help="the archive's reconcile/sources/inferencemax/raw")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    runs = collect(args.raw)
    if not runs:
        print(f"no held-out run under {args.raw}", file=sys.stderr)
        return 2
    args.out.write_text(render(runs), "utf-8")
    print(f"{len(runs)} runs -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
