"""guidellm's report (``--output kind=json``: ``benchmarks.json``): per benchmark, summaries
(ms, but request latency in seconds) and each request's stats with the body's id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastmode.clients.verify.records import ToolRequest, ToolRun, number, scaled

NAMES = ("benchmarks.json", "benchmark.json")
_METRICS = {"ttft": "time_to_first_token_ms", "itl": "inter_token_latency_ms",
            "tpot": "time_per_output_token_ms", "e2e": "request_latency"}


def is_report(doc: Any) -> bool:
    benches = doc.get("benchmarks") if isinstance(doc, dict) else None
    return (isinstance(benches, list) and bool(benches) and isinstance(benches[0], dict)
            and isinstance(benches[0].get("metrics"), dict))


def _dist(d: dict[str, Any] | None, scale: float) -> dict[str, float]:
    """A guidellm distribution summary (``median``, ``mean``, ``percentiles``)."""
    if not isinstance(d, dict):
        return {}
    out = scaled(d.get("percentiles") or {}, {"p50": "p50", "p90": "p90", "p99": "p99"}, scale)
    out.update(scaled(d, {"mean": "mean"}, scale))
    if "p50" not in out:
        out.update(scaled(d, {"p50": "median"}, scale))
    return out


def read(path: Path, doc: dict[str, Any], index: int = 0) -> ToolRun:
    run = ToolRun("guidellm", str(path), percentiles="nearest", itl="request-per-token",
                  tpot="from-start")
    bench = doc["benchmarks"][index]
    metrics = bench.get("metrics", {})
    for ours, theirs in _METRICS.items():
        m = metrics.get(theirs) or {}
        stats = _dist(m.get("successful", m), 1.0 if theirs == "request_latency" else 1e-3)
        if stats:
            run.metrics[ours] = stats
    for ours, theirs in (("output_tps", "output_tokens_per_second"),
                         ("request_tps", "requests_per_second")):
        m = metrics.get(theirs) or {}
        stats = _dist(m.get("successful", m), 1.0)
        if "mean" in stats:
            run.metrics[ours] = {"value": stats["mean"]}
    for r in (bench.get("requests") or {}).get("successful") or []:
        ttft, itl, out = (number(r.get("time_to_first_token_ms")),
                          number(r.get("inter_token_latency_ms")), number(r.get("output_tokens")))
        run.requests.append(ToolRequest(
            r.get("request_id"), number(r.get("request_start_time")),
            None if ttft is None else ttft / 1000, number(r.get("request_latency")),
            None if itl is None else itl / 1000, None if out is None else int(out),
            r.get("response_id")))
    return run
