"""The model against publishers it was never fitted to: the held-out InferenceMAX runs.

``bench/data/heldout_inferencemax.toml`` holds SemiAnalysis InferenceMAX's DeepSeek-R1 runs and
its B200 TensorRT-LLM gpt-oss runs (extracted once by ``bench/heldout_extract.py``; they are
not in the calibration set and never enter the fit). Each run is predicted the way a user would
ask for it, through ``fastmode predict`` itself (``fastmode.cli.main`` with the flags below, its
JSON read back), and its median TTFT, mean TPOT and output tokens/s per GPU compared with the
measured ones. Printed: the median absolute error per slice (model and precision x hardware x
engine) and per metric, the runs ``predict`` refuses, and the totals. Nothing is asserted.

How a run becomes a ``predict`` call (the sweep's conditions, see the data file's header):

    --model     deepseek-v3 (FP8 and AMD's MXFP4 checkpoints), deepseek-v3-nvfp4 (NVIDIA's
                NVFP4), gpt-oss-120b
    --precision fp8, mxfp4 (AMD's DeepSeek and gpt-oss), fp4 (NVFP4)
    --hardware / --chips / --engine   hw (b200-trt is a B200), tp, framework
    --batch     conc (a closed loop); --max-batch max(256, conc)
    --expert-parallel ep, --attention-dp when dp_attention
    --prompt-tokens / --output-tokens  0.9 x isl / osl: the mean of the sweep's lengths,
                uniform on [0.8 x L, L]
    --scheduler-recv-interval  SGLang on B200: 30 at conc >= 16, else 10 (the sweep's
                DeepSeek-R1 B200 SGLang launch scripts, FP8 and NVFP4, set
                --scheduler-recv-interval so); every other run: 1 (the engine's default)

    python bench/heldout.py           # the tables
    python bench/heldout.py --runs    # and every run, predicted / measured
    python bench/heldout.py --json    # one JSON object
    python bench/heldout.py --stepped # and the runs whose users' whole sequences do not all
                                      # fit the KV cache, also stepped on the scheduler
                                      # (backends.closed_loop: the same benchmark in virtual
                                      # time, 10 x conc requests from a cold start)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastmode.backends.closed_loop import LoopSpec, stepped_closed_loop
from fastmode.backends.predict import PlacementOptions, build_placement
from fastmode.backends.profiles import Catalog
from fastmode.cli import main as fastmode

DATA = Path(__file__).resolve().parent / "data" / "heldout_inferencemax.toml"
HARDWARE = {"b200": "b200", "b200-trt": "b200", "h200": "h200", "mi300x": "mi300x",
            "mi325x": "mi325x", "mi355x": "mi355x"}
ENGINES = {"sglang": "sglang", "trt": "trtllm", "atom": "atom", "vllm": "vllm"}
# runs whose launch script polls for new requests every N scheduler steps: (hw, framework)
RECV_INTERVAL = {("b200", "sglang"): (30, 10)}  # (at conc >= 16, below)
METRICS = ("ttft", "tpot", "throughput")
MEAN_LENGTH = 0.9  # lengths uniform on [0.8 x L, L] (--random-range-ratio 0.8)


def model_of(run: dict[str, Any]) -> tuple[str, str]:
    """The model profile and --precision of a run's checkpoint."""
    name = str(run["model"])
    if "gpt-oss" in name:
        return "gpt-oss-120b", "mxfp4"
    if run["precision"] == "fp8":
        return "deepseek-v3", "fp8"
    if "MXFP4" in name:
        return "deepseek-v3", "mxfp4"
    return "deepseek-v3-nvfp4", "fp4"


def predict_argv(run: dict[str, Any]) -> list[str]:
    """The ``fastmode predict`` command line of a run."""
    model, precision = model_of(run)
    tp, ep, conc = int(run["tp"]), int(run["ep"]), int(run["conc"])
    argv = ["predict", "--model", model, "--precision", precision,
            "--hardware", HARDWARE[run["hw"]], "--chips", str(tp),
            "--engine", ENGINES[run["framework"]],
            "--batch", str(conc), "--max-batch", str(max(256, conc)),
            "--prompt-tokens", str(round(MEAN_LENGTH * run["isl"])),
            "--output-tokens", str(round(MEAN_LENGTH * run["osl"])),
            "--expert-parallel", str(ep if tp % ep == 0 else 1), "--json"]
    if run["dp_attention"]:
        argv.append("--attention-dp")
    if recv_interval(run) > 1:
        argv += ["--scheduler-recv-interval", str(recv_interval(run))]
    return argv


@dataclass
class Scored:
    run: dict[str, Any]
    argv: list[str]
    predicted: dict[str, float] = field(default_factory=dict)  # metric -> value, SI
    refused: str = ""  # predict's error when it refuses the run

    @property
    def measured(self) -> dict[str, float]:
        return {"ttft": float(self.run["median_ttft"]), "tpot": float(self.run["mean_tpot"]),
                "throughput": float(self.run["output_tput_per_gpu"])}

    def errors(self) -> dict[str, float]:
        """Relative error predicted / measured - 1 per metric (empty when refused)."""
        return {m: self.predicted[m] / self.measured[m] - 1.0 for m in self.predicted}

    @property
    def slice(self) -> str:
        model, precision = model_of(self.run)
        return f"{model} {precision} | {self.run['hw']} | {self.run['framework']}"


def score(run: dict[str, Any]) -> Scored:
    """One run through ``fastmode predict`` (in process: the CLI's parser, checks and JSON)."""
    s = Scored(run, predict_argv(run))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = fastmode(s.argv)
    if status != 0:
        s.refused = err.getvalue().strip() or f"exit status {status}"
        return s
    o = json.loads(out.getvalue())
    s.predicted = {"ttft": o["ttft_s"], "tpot": o["itl_s"],
                   "throughput": o["output_tokens_per_s_total"] / int(run["tp"])}
    return s


def load_runs(path: Path = DATA) -> list[dict[str, Any]]:
    with path.open("rb") as f:
        return list(tomllib.load(f)["runs"])


def median_abs(values: list[float]) -> float | None:
    return statistics.median(abs(v) for v in values) if values else None


def summary(scored: list[Scored]) -> dict[str, Any]:
    """Median absolute errors per slice and metric, and the totals."""
    def stats(group: list[Scored]) -> dict[str, Any]:
        errs = [s.errors() for s in group]
        per = {m: median_abs([e[m] for e in errs if m in e]) for m in METRICS}
        flat = [v for e in errs for v in e.values()]
        return {"runs": len(group), "figures": 3 * len(group), "predicted": len(flat),
                "refused": sum(1 for s in group if s.refused),
                "median": median_abs(flat), **per}
    slices: dict[str, list[Scored]] = {}
    for s in scored:
        slices.setdefault(s.slice, []).append(s)
    return {"all": stats(scored), "slices": {k: stats(v) for k, v in sorted(slices.items())}}


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def print_tables(summ: dict[str, Any]) -> None:
    rows = [*summ["slices"].items(), ("all", summ["all"])]
    width = max(len(k) for k, _ in rows)
    print(f"{'slice (model precision | hardware | engine)':<{width}}  runs  refused  "
          f"median     TTFT     TPOT  tput/GPU")
    for k, st in rows:
        if k == "all":
            print("-" * (width + 52))
        print(f"{k:<{width}}  {st['runs']:>4}  {st['refused']:>7}  {pct(st['median']):>6}  "
              f"{pct(st['ttft']):>7}  {pct(st['tpot']):>7}  {pct(st['throughput']):>8}")
    a = summ["all"]
    print(f"\n{a['predicted']} of {a['figures']} figures predicted ({a['refused']} runs refused); "
          f"median |error| {pct(a['median'])}: TTFT {pct(a['ttft'])}, TPOT {pct(a['tpot'])}, "
          f"throughput per GPU {pct(a['throughput'])}")


def print_runs(scored: list[Scored]) -> None:
    for s in scored:
        r = s.run
        head = (f"{s.slice} | {r['isl']}/{r['osl']} tp{r['tp']} ep{r['ep']}"
                f"{' dp' if r['dp_attention'] else ''} c{r['conc']}")
        if s.refused:
            print(f"{head}: refused ({s.refused})")
            continue
        p, m = s.predicted, s.measured
        print(f"{head}: TTFT {p['ttft'] * 1e3:.0f}/{m['ttft'] * 1e3:.0f} ms, "
              f"TPOT {p['tpot'] * 1e3:.2f}/{m['tpot'] * 1e3:.2f} ms, "
              f"tput {p['throughput']:.0f}/{m['throughput']:.0f} tok/s/GPU (predicted/measured)")


def recv_interval(run: dict[str, Any]) -> int:
    recv = RECV_INTERVAL.get((run["hw"], run["framework"]))
    return 1 if recv is None else recv[0] if int(run["conc"]) >= 16 else recv[1]


def print_stepped(scored: list[Scored]) -> None:
    """The runs whose users' whole sequences overflow the KV cache, closed form against the
    stepped loop (TTFT: the closed form's mean; the stepped loop's mean and median)."""
    catalog = Catalog.builtin()
    for s in scored:
        r = s.run
        if s.refused:
            continue
        model, precision = model_of(r)
        tp, ep, conc = int(r["tp"]), int(r["ep"]), int(r["conc"])
        opts = PlacementOptions(engine=ENGINES[r["framework"]], attention_dp=r["dp_attention"],
                                expert_parallel=ep if tp % ep == 0 else 1)
        p, _ = build_placement(catalog, model, HARDWARE[r["hw"]], tp, precision, 8192,
                               options=opts)
        if conc * (r["isl"] + r["osl"]) <= p.kv_capacity_tokens:
            continue
        f = stepped_closed_loop(p, LoopSpec(conc, r["isl"], r["osl"], ratio=0.8,
                                            max_batch=max(256, conc),
                                            recv_interval=recv_interval(r),
                                            request_overhead=True))
        m, c = s.measured, s.predicted
        print(f"{s.slice} | {r['isl']}/{r['osl']} tp{tp} ep{ep} c{conc} (KV {p.kv_capacity_tokens}"
              f" tokens): TTFT {c['ttft'] * 1e3:.0f} closed form, {f.ttft_mean_s * 1e3:.0f} / "
              f"{f.ttft_median_s * 1e3:.0f} stepped mean / median, {m['ttft'] * 1e3:.0f} "
              f"measured ms; TPOT {c['tpot'] * 1e3:.2f} / {f.tpot_s * 1e3:.2f} / "
              f"{m['tpot'] * 1e3:.2f} ms; tput {c['throughput']:.0f} / "
              f"{f.output_tokens_per_s / tp:.0f} / {m['throughput']:.0f} tok/s/GPU; "
              f"{f.preemptions} preemptions")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="the held-out runs (TOML)")
    ap.add_argument("--runs", action="store_true", help="print every run")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--stepped", action="store_true",
                    help="also step the KV-bound runs on the scheduler (backends.closed_loop)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    scored = [score(r) for r in load_runs(args.data)]
    summ = summary(scored)
    if args.json:
        summ["refused_runs"] = [{"argv": s.argv, "error": s.refused} for s in scored if s.refused]
        print(json.dumps(summ, indent=2))
        return 0
    if args.runs:
        print_runs(scored)
        print()
    print_tables(summ)
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.stepped:
        print()
        print_stepped(scored)
    return 0


if __name__ == "__main__":
    sys.exit(main())
