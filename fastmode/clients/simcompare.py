"""``--compare-sim``: run ``fastmode simulate --json`` on the same workload, line figures up.

The simulator is run as a subprocess (the same interpreter, ``-m fastmode simulate``): the
client side never imports the server's packages, and a simulator that changes its internals
keeps working as long as its command line and JSON stay the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from fastmode.clients.workload import FlagWorkload

SIM_TIMEOUT_S = 900.0

# (label, path in the bench summary of a tier, path in the simulator's tier object)
FIGURES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("TTFT p50 (s)", ("ttft_s", "p50"), ("ttft_s", "p50")),
    ("TTFT p90 (s)", ("ttft_s", "p90"), ("ttft_s", "p90")),
    ("TTFT p99 (s)", ("ttft_s", "p99"), ("ttft_s", "p99")),
    ("ITL p50 (s)", ("itl_s", "p50"), ("itl_s", "p50")),
    ("ITL p99 (s)", ("itl_s", "p99"), ("itl_s", "p99")),
    ("ITL mean (s)", ("itl_s", "mean"), ("itl_s", "mean")),
    ("E2E p50 (s)", ("e2e_s", "p50"), ("e2e_s", "p50")),
    ("E2E p99 (s)", ("e2e_s", "p99"), ("e2e_s", "p99")),
    ("tok/s per user p50", ("user_tokens_per_s", "p50"), ("output_tokens_per_s_per_user_p50",)),
    ("output tok/s (tier)", ("output_tokens_per_s",), ("output_tokens_per_s",)),
    ("cost per request ($)", ("cost_usd", "per_request"), ("cost_per_request",)),
    ("requests completed", ("ok",), ("completed",)),
)


class SimError(RuntimeError):
    """The simulator could not be run or gave no usable answer."""


def simulate_args(
    wl: FlagWorkload,
    rate: float | None,
    concurrency: int | None,
    duration: float | None,
    requests: int | None,
    arrivals: str,
    config: str | None = None,
) -> list[str]:
    """The ``fastmode simulate`` arguments describing the bench workload."""
    args = ["simulate", "--json", "--seed", str(wl.seed)]
    if config:
        args += ["--config", config]
    if rate is not None:
        args += ["--rate", repr(rate), "--arrivals", arrivals]
    if concurrency is not None:
        args += ["--concurrency", str(concurrency)]
    if duration is not None:
        args += ["--duration", repr(duration)]
    if requests is not None:
        args += ["--requests", str(requests)]
    args += [
        "--prompt-tokens", str(wl.prompt.mean), "--prompt-dist", wl.prompt.kind,
        "--output-tokens", str(wl.output.mean), "--output-dist", wl.output.kind,
        "--mix", ",".join(f"{k}={v!r}" for k, v in wl.mix.items()),
    ]  # fmt: skip
    return args


def run_simulate(args: list[str], timeout: float = SIM_TIMEOUT_S) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "fastmode", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SimError(f"fastmode simulate could not run: {exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SimError(f"fastmode simulate failed (exit {proc.returncode}): {tail[0]}")
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise SimError("fastmode simulate --json did not print JSON") from None
    if not isinstance(out, dict) or not isinstance(out.get("tiers"), dict):
        raise SimError("fastmode simulate --json: no 'tiers' object in its output")
    return out


def _get(obj: Any, path: tuple[str, ...]) -> float | None:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return float(obj) if isinstance(obj, int | float) and not isinstance(obj, bool) else None


def relative(measured: float | None, predicted: float | None) -> float | None:
    """(measured - predicted) / predicted; None when either is missing or predicted is 0."""
    if measured is None or predicted is None or predicted == 0:
        return None
    return (measured - predicted) / predicted


def compare(summary: dict[str, Any], sim: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of (tier, figure, measured, predicted, relative difference)."""
    rows: list[dict[str, Any]] = []
    for tier, measured in summary["tiers"].items():
        predicted = dict(sim["tiers"].get(tier) or {})
        if not predicted:
            continue
        done = predicted.get("completed") or 0
        cost = predicted.get("cost_usd")
        predicted["cost_per_request"] = cost / done if done and cost is not None else None
        for label, mpath, spath in FIGURES:
            m, p = _get(measured, mpath), _get(predicted, spath)
            rows.append({"tier": tier, "figure": label, "measured": m, "predicted": p,
                         "absolute_difference": None if m is None or p is None else m - p,
                         "relative_difference": relative(m, p)})
    return rows
