"""inference-perf's report folder: ``summary_lifecycle_metrics.json`` (seconds) and, with
``report.request_lifecycle.per_request: true``, ``per_request_lifecycle_metrics.json``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fastmode.clients.verify.records import ToolRequest, ToolRun, Unreadable, number, scaled

SUMMARY = "summary_lifecycle_metrics.json"
PER_REQUEST = "per_request_lifecycle_metrics.json"
_ID = re.compile(r'"id":\s*"([^"]+)"')


def is_summary(doc: Any) -> bool:
    return isinstance(doc, dict) and "load_summary" in doc and (
        "successes" in doc or "failures" in doc)


def read(path: Path, doc: dict[str, Any]) -> ToolRun:
    """``successes.latency.*`` in seconds; the per-request file beside it, when present."""
    run = ToolRun("inference-perf", str(path), clock="monotonic")
    ok = doc.get("successes") or {}
    if not ok.get("count"):
        raise Unreadable(f"{path}: inference-perf's report has no successful request")
    lat = ok.get("latency") or {}
    keys = {"p50": "median", "p90": "p90", "p99": "p99", "mean": "mean"}
    for ours, theirs in (("ttft", "time_to_first_token"), ("itl", "inter_token_latency"),
                         ("tpot", "time_per_output_token"), ("e2e", "request_latency")):
        stats = scaled(lat.get(theirs), keys)
        if stats:
            run.metrics[ours] = stats
    itl = lat.get("inter_token_latency") or {}
    if number(itl.get("min")) == 0.0:
        zero = max((float(k[1:]) for k, v in itl.items()
                    if re.fullmatch(r"p\d+(\.\d+)?", k) and v == 0.0), default=0.0)
        run.hints["itl"] = (f"its gaps include zeros (at least {zero:g}% of them): it splits each "
                            "chunk into its own tokenizer's tokens and counts a zero gap for "
                            "all but the first, and chunks read together give zeros too")
    tput = ok.get("throughput") or {}
    for ours, theirs in (("output_tps", "output_tokens_per_sec"),
                         ("request_tps", "requests_per_sec")):
        if number(tput.get(theirs)) is not None:
            run.metrics[ours] = {"value": float(tput[theirs])}
    per = path.parent / PER_REQUEST
    if per.exists():
        run.requests = [_request(r) for r in json.loads(per.read_text()) if not r.get("error")]
    return run


def _request(r: dict[str, Any]) -> ToolRequest:
    """One per-request record: its clock is monotonic (``time.perf_counter``: no Unix start,
    ``clock.align`` places it); the body's id is read from the response it kept, the output
    tokens are its own count, and ``output_token_times`` its reading of each token (the first
    is its TTFT's end)."""
    found = _ID.search(r.get("response") or "")
    metrics = (r.get("info") or {}).get("response_metrics") or {}
    out = number(metrics.get("output_tokens"))
    start, end = number(r.get("start_time")), number(r.get("end_time"))
    raw = metrics.get("output_token_times")
    times = [float(x) for x in raw] if isinstance(raw, list) and raw and all(
        number(x) is not None for x in raw) else None
    ttft = times[0] - start if times is not None and start is not None else None
    return ToolRequest(None, start, ttft,
                       None if start is None or end is None else end - start, None,
                       None if out is None else int(out), found.group(1) if found else None,
                       token_times=times)
