"""Each load generator's own results file, read into one shape (``ToolRun``).

Supported (the format is recognised from the file itself, or named with ``--tool``):

* ``fastmode`` — ``fastmode bench --json`` (summaries per tier and overall, seconds);
* ``aiperf`` — the profile export: ``profile_export_aiperf.json`` (summary, ms) and, next to it,
  ``profile_export.jsonl`` (one record per request, with its ``x_request_id``);
* ``guidellm`` — the report (``benchmarks.json``): per benchmark, summaries and the requests;
* ``vllm`` — ``vllm bench serve --save-result`` (summary in ms; ``ttfts``/``itls`` per request
  with ``--save-detailed``);
* ``inference-perf`` — its ``summary_lifecycle_metrics.json`` report (seconds).

Metrics are named ``ttft``, ``itl``, ``tpot``, ``e2e`` (seconds; stats ``p50``/``p90``/``p99``/
``mean``), ``output_tps`` and ``request_tps`` (stat ``value``), ``output_tokens`` (``total``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Stats = dict[str, float]
STATS = ("p50", "p90", "p99", "mean")


@dataclass(slots=True)
class ToolRequest:
    """One request as the tool measured it (seconds); None where it does not say."""

    request_id: str | None = None
    start: float | None = None  # Unix time the tool started its clock
    ttft: float | None = None
    e2e: float | None = None
    itl: float | None = None  # the tool's per-request ITL (its mean)
    output_tokens: int | None = None
    response_id: str | None = None  # the id in the response body, if the tool keeps it


@dataclass
class ToolRun:
    tool: str
    source: str
    metrics: dict[str, Stats] = field(default_factory=dict)
    requests: list[ToolRequest] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the file says about how it measured
    percentiles: str = "linear"  # how the tool computes them (``compare.percentile``)


def _scaled(d: dict[str, Any] | None, keys: dict[str, str], scale: float = 1.0) -> Stats:
    """``{our stat: d[their key] * scale}`` for the keys present."""
    out: Stats = {}
    for ours, theirs in keys.items():
        v = (d or {}).get(theirs)
        if isinstance(v, int | float):
            out[ours] = float(v) * scale
    return out


# -- fastmode bench --json ----------------------------------------------------------------------

def read_fastmode(path: Path, doc: dict[str, Any], tier: str | None = None) -> ToolRun:
    run = ToolRun("fastmode", str(path))
    rows = doc["tiers"]
    s = rows[tier] if tier else (doc["overall"] if len(rows) > 1 else next(iter(rows.values())))
    same = {k: k for k in STATS}
    for ours, theirs in (("ttft", "ttft_s"), ("itl", "itl_s"), ("tpot", "tpot_s"),
                         ("e2e", "e2e_s")):
        run.metrics[ours] = _scaled(s.get(theirs), same)
    run.metrics["output_tps"] = {"value": float(s["output_tokens_per_s"])}
    run.metrics["request_tps"] = {"value": float(s["requests_per_s"])}
    run.metrics["output_tokens"] = {"total": float(s["output_tokens"])}
    return run


# -- aiperf -----------------------------------------------------------------------------------

_AIPERF = {"ttft": "time_to_first_token", "itl": "inter_token_latency",
           "e2e": "request_latency"}
_AIPERF_STATS = {"p50": "p50", "p90": "p90", "p99": "p99", "mean": "avg"}
_MS = {"ms": 1e-3, "ns": 1e-9, "s": 1.0, "sec": 1.0}


def _aiperf_metric(m: dict[str, Any] | None) -> Stats:
    if not m:
        return {}
    return _scaled(m, _AIPERF_STATS, _MS.get(str(m.get("unit", "ms")), 1e-3))


def read_aiperf(path: Path, doc: dict[str, Any] | None) -> ToolRun:
    """``path``: the summary JSON or the directory of the export (records read if present)."""
    base = path if path.is_dir() else path.parent
    run = ToolRun("aiperf", str(path))
    if doc is None:
        summary = next(iter(sorted(base.glob("*_aiperf.json"))), None)
        doc = json.loads(summary.read_text()) if summary else {}
    metrics = doc.get("records", doc) if isinstance(doc, dict) else {}
    for ours, theirs in _AIPERF.items():
        stats = _aiperf_metric(metrics.get(theirs))
        if stats:
            run.metrics[ours] = stats
    for ours, theirs in (("output_tps", "output_token_throughput"),
                         ("request_tps", "request_throughput")):
        m = metrics.get(theirs)
        if m and isinstance(m.get("avg"), int | float):
            run.metrics[ours] = {"value": float(m["avg"])}
    osl = metrics.get("output_sequence_length")
    count = metrics.get("request_count")
    if osl and count and isinstance(osl.get("avg"), int | float):
        n = count.get("avg")
        if isinstance(n, int | float):
            run.metrics["output_tokens"] = {"total": float(osl["avg"]) * float(n)}
    records = base / "profile_export.jsonl"
    if records.exists():
        run.requests = [r for r in map(_aiperf_request, records.read_text().splitlines()) if r]
        if "ttft" not in run.metrics and run.requests:
            run.notes.append("summary missing: metrics from the per-request records")
    return run


def _aiperf_request(line: str) -> ToolRequest | None:
    if not line.strip():
        return None
    rec = json.loads(line)
    meta, m = rec.get("metadata", {}), rec.get("metrics", {})
    if meta.get("benchmark_phase", "profiling") != "profiling" or rec.get("error"):
        return None

    def val(name: str) -> float | None:
        x = m.get(name)
        if not isinstance(x, dict) or not isinstance(x.get("value"), int | float):
            return None
        return float(x["value"]) * _MS.get(str(x.get("unit", "ms")), 1e-3)

    start_ns = meta.get("request_start_ns")
    osl = m.get("output_sequence_length", {}).get("value") if m else None
    return ToolRequest(meta.get("x_request_id"),
                       start_ns / 1e9 if isinstance(start_ns, int | float) else None,
                       val("time_to_first_token"), val("request_latency"),
                       val("inter_token_latency"),
                       int(osl) if isinstance(osl, int | float) else None)


# -- vllm bench serve --save-result -----------------------------------------------------------

def read_vllm(path: Path, doc: dict[str, Any]) -> ToolRun:
    run = ToolRun("vllm", str(path))
    for ours, theirs in (("ttft", "ttft"), ("itl", "itl"), ("tpot", "tpot"), ("e2e", "e2el")):
        stats = _scaled(doc, {"p50": f"median_{theirs}_ms", "p90": f"p90_{theirs}_ms",
                              "p99": f"p99_{theirs}_ms", "mean": f"mean_{theirs}_ms"}, 1e-3)
        if stats:
            run.metrics[ours] = stats
    if isinstance(doc.get("output_throughput"), int | float):
        run.metrics["output_tps"] = {"value": float(doc["output_throughput"])}
    if isinstance(doc.get("request_throughput"), int | float):
        run.metrics["request_tps"] = {"value": float(doc["request_throughput"])}
    if isinstance(doc.get("total_output_tokens"), int | float):
        run.metrics["output_tokens"] = {"total": float(doc["total_output_tokens"])}
    ttfts, lens = doc.get("ttfts") or [], doc.get("output_lens") or []
    for k, ttft in enumerate(ttfts):
        run.requests.append(ToolRequest(None, None, ttft, None, None,
                                        lens[k] if k < len(lens) else None))
    return run


def detect(doc: Any, path: Path) -> str:
    if path.is_dir() or (isinstance(doc, dict) and "aiperf_version" in doc):
        return "aiperf"
    if isinstance(doc, dict) and "fastmode_bench" in doc:
        return "fastmode"
    if isinstance(doc, dict) and "benchmarks" in doc:
        return "guidellm"
    if isinstance(doc, dict) and any(k.startswith("median_") and k.endswith("_ms") for k in doc):
        return "vllm"
    if isinstance(doc, dict) and ("successes" in doc or "load_summary" in doc):
        return "inference-perf"
    raise ValueError(f"{path}: not a results file of a known tool (fastmode bench --json, "
                     "aiperf, guidellm, vllm bench serve, inference-perf)")


def read(source: str, tool: str | None = None, tier: str | None = None) -> ToolRun:
    """The results in ``source`` (a file, or aiperf's export directory)."""
    path = Path(source)
    doc = None if path.is_dir() else json.loads(path.read_text())
    kind = tool or detect(doc, path)
    if kind == "aiperf":
        return read_aiperf(path, doc)
    if doc is None:
        raise ValueError(f"{path}: a directory; only aiperf's export is read from one")
    if kind == "fastmode":
        return read_fastmode(path, doc, tier)
    if kind == "vllm":
        return read_vllm(path, doc)
    from .tools_more import read_guidellm, read_inference_perf
    if kind == "guidellm":
        return read_guidellm(path, doc)
    if kind == "inference-perf":
        return read_inference_perf(path, doc)
    raise ValueError(f"unknown tool {kind!r}")
