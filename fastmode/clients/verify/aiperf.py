"""aiperf's profile export: ``profile_export_aiperf.json`` (the summary, ms) and, beside it,
``profile_export.jsonl`` (one record per request, with the ``x_request_id`` it sent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastmode.clients.verify.records import ToolRequest, ToolRun, Unreadable, number, scaled

SUMMARY_GLOB = "*_aiperf.json"
RECORDS = "profile_export.jsonl"
_METRICS = {"ttft": "time_to_first_token", "itl": "inter_token_latency",
            "e2e": "request_latency"}
_STATS = {"p50": "p50", "p90": "p90", "p99": "p99", "mean": "avg"}
_UNIT = {"ms": 1e-3, "ns": 1e-9, "s": 1.0, "sec": 1.0}


def is_summary(doc: Any) -> bool:
    """aiperf's summary: its version, or its ``records`` of metrics with a unit each."""
    if not isinstance(doc, dict):
        return False
    if "aiperf_version" in doc:
        return True
    recs = doc.get("records")
    return isinstance(recs, dict) and any(
        isinstance(m, dict) and "unit" in m for k, m in recs.items() if k in _METRICS.values())


def is_record(line: str) -> bool:
    """One line of ``profile_export.jsonl``: ``metadata`` (with its phase) and ``metrics``."""
    try:
        rec = json.loads(line)
    except ValueError:
        return False
    return (isinstance(rec, dict) and isinstance(rec.get("metadata"), dict)
            and isinstance(rec.get("metrics"), dict) and "benchmark_phase" in rec["metadata"])


def _metric(m: dict[str, Any] | None) -> dict[str, float]:
    if not isinstance(m, dict):
        return {}
    return scaled(m, _STATS, _UNIT.get(str(m.get("unit", "ms")), 1e-3))


def read(path: Path) -> ToolRun:
    """``path``: the export directory, its summary JSON or its records JSONL."""
    base = path if path.is_dir() else path.parent
    run = ToolRun("aiperf", str(path), itl="request")
    summary = path if path.suffix == ".json" else next(iter(sorted(base.glob(SUMMARY_GLOB))),
                                                       None)
    doc: dict[str, Any] = {}
    if summary is not None:
        doc = json.loads(summary.read_text())
        if not is_summary(doc):
            raise Unreadable(f"{summary}: not aiperf's summary (no aiperf_version, no records)")
    metrics = doc.get("records", doc)
    for ours, theirs in _METRICS.items():
        stats = _metric(metrics.get(theirs))
        if stats:
            run.metrics[ours] = stats
    for ours, theirs in (("output_tps", "output_token_throughput"),
                         ("request_tps", "request_throughput")):
        m = metrics.get(theirs)
        if isinstance(m, dict) and number(m.get("avg")) is not None:
            run.metrics[ours] = {"value": float(m["avg"])}
    osl, count = metrics.get("output_sequence_length"), metrics.get("request_count")
    if isinstance(osl, dict) and isinstance(count, dict):
        avg, n = number(osl.get("avg")), number(count.get("avg"))
        if avg is not None and n is not None:
            run.metrics["output_tokens"] = {"total": avg * n}
    records = path if path.suffix == ".jsonl" else base / RECORDS
    if records.exists():
        run.requests = [r for r in map(_request, records.read_text().splitlines()) if r]
        if not run.metrics and run.requests:
            run.notes.append("no summary beside the records: only the per-request figures")
    return run


def _request(line: str) -> ToolRequest | None:
    if not line.strip():
        return None
    rec = json.loads(line)
    meta, m = rec.get("metadata", {}), rec.get("metrics", {})
    if meta.get("benchmark_phase", "profiling") != "profiling" or rec.get("error"):
        return None

    def val(name: str) -> float | None:
        x = m.get(name)
        if not isinstance(x, dict) or number(x.get("value")) is None:
            return None
        return float(x["value"]) * _UNIT.get(str(x.get("unit", "ms")), 1e-3)

    start_ns = number(meta.get("request_start_ns"))
    osl = number((m.get("output_sequence_length") or {}).get("value"))
    return ToolRequest(meta.get("x_request_id"), None if start_ns is None else start_ns / 1e9,
                       val("time_to_first_token"), val("request_latency"),
                       val("inter_token_latency"), None if osl is None else int(osl),
                       connect=val("http_req_connecting"))
