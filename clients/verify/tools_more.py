"""guidellm's and inference-perf's reports (``clients.verify.tools`` has the shape)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .tools import ToolRequest, ToolRun, _scaled

_GUIDELLM = {"ttft": "time_to_first_token_ms", "itl": "inter_token_latency_ms",
             "tpot": "time_per_output_token_ms", "e2e": "request_latency"}


def _dist(d: dict[str, Any] | None, scale: float) -> dict[str, float]:
    """A guidellm distribution summary (``median``, ``mean``, ``percentiles``)."""
    if not d:
        return {}
    pct = d.get("percentiles") or {}
    out = _scaled(pct, {"p50": "p50", "p90": "p90", "p99": "p99"}, scale)
    out.update(_scaled(d, {"mean": "mean"}, scale))
    if "p50" not in out:
        out.update(_scaled(d, {"p50": "median"}, scale))
    return out


def read_guidellm(path: Path, doc: dict[str, Any], index: int = 0) -> ToolRun:
    run = ToolRun("guidellm", str(path), percentiles="nearest")
    bench = doc["benchmarks"][index]
    metrics = bench.get("metrics", {})
    for ours, theirs in _GUIDELLM.items():
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
    reqs = (bench.get("requests") or {}).get("successful") or []
    for r in reqs:  # guidellm 0.8: each request's stats, with the body's id (response_id)
        ttft, itl, out = (r.get("time_to_first_token_ms"), r.get("inter_token_latency_ms"),
                          r.get("output_tokens"))
        run.requests.append(ToolRequest(
            r.get("request_id"), r.get("request_start_time"),
            ttft / 1000 if isinstance(ttft, int | float) else None, r.get("request_latency"),
            itl / 1000 if isinstance(itl, int | float) else None,
            int(out) if isinstance(out, int | float) else None, r.get("response_id")))
    return run


def read_inference_perf(path: Path, doc: dict[str, Any]) -> ToolRun:
    """``summary_lifecycle_metrics.json``: ``successes.latency.*`` in seconds."""
    run = ToolRun("inference-perf", str(path))
    ok = doc.get("successes") or {}
    lat = ok.get("latency") or {}
    keys = {"p50": "median", "p90": "p90", "p99": "p99", "mean": "mean"}
    for ours, theirs in (("ttft", "time_to_first_token"), ("itl", "inter_token_latency"),
                         ("tpot", "time_per_output_token"), ("e2e", "request_latency")):
        stats = _scaled(lat.get(theirs), keys)
        if stats:
            run.metrics[ours] = stats
    tput = ok.get("throughput") or {}
    if isinstance(tput.get("output_tokens_per_sec"), int | float):
        run.metrics["output_tps"] = {"value": float(tput["output_tokens_per_sec"])}
    if isinstance(tput.get("requests_per_sec"), int | float):
        run.metrics["request_tps"] = {"value": float(tput["requests_per_sec"])}
    per = path.parent / "per_request_lifecycle_metrics.json"
    if per.exists():  # report.request_lifecycle.per_request: true
        run.requests = [_ip_request(r) for r in json.loads(per.read_text())
                        if not r.get("error")]
    return run


_ID = re.compile(r'"id":\s*"([^"]+)"')


def _ip_request(r: dict[str, Any]) -> ToolRequest:
    """One of inference-perf's per-request records: its clock is monotonic (no Unix start);
    the body's id is read from the response it kept, the output tokens are its own count."""
    found = _ID.search(r.get("response") or "")
    info = r.get("info") or {}
    out = (info.get("response_metrics") or {}).get("output_tokens")
    start, end = r.get("start_time"), r.get("end_time")
    return ToolRequest(None, None, None,
                       end - start if isinstance(start, int | float)
                       and isinstance(end, int | float) else None,
                       None, int(out) if isinstance(out, int | float) else None,
                       found.group(1) if found else None)
