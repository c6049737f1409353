"""Summary-only results: ``fastmode bench --json`` (per tier and overall, seconds) and
``vllm bench serve --save-result`` (ms; ``ttfts``/``output_lens`` with ``--save-detailed``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastmode.clients.verify.records import STATS, ToolRequest, ToolRun, Unreadable, number, scaled


def is_fastmode(doc: Any) -> bool:
    return isinstance(doc, dict) and "fastmode_bench" in doc and isinstance(doc.get("tiers"), dict)


def is_vllm(doc: Any) -> bool:
    return isinstance(doc, dict) and any(
        k.startswith("median_") and k.endswith("_ms") for k in doc)


def read_fastmode(path: Path, doc: dict[str, Any], tier: str | None = None) -> ToolRun:
    run = ToolRun("fastmode", str(path))
    rows = doc["tiers"]
    if tier is not None and tier not in rows:
        raise Unreadable(f"{path}: no tier {tier!r} (it has {', '.join(rows) or 'none'})")
    if not rows:
        raise Unreadable(f"{path}: fastmode bench measured no tier")
    s = rows[tier] if tier else (doc["overall"] if len(rows) > 1 else next(iter(rows.values())))
    same = {k: k for k in STATS}
    for ours, theirs in (("ttft", "ttft_s"), ("itl", "itl_s"), ("tpot", "tpot_s"),
                         ("e2e", "e2e_s")):
        run.metrics[ours] = scaled(s.get(theirs), same)
    run.metrics["output_tps"] = {"value": float(s["output_tokens_per_s"])}
    run.metrics["request_tps"] = {"value": float(s["requests_per_s"])}
    run.metrics["output_tokens"] = {"total": float(s["output_tokens"])}
    return run


def read_vllm(path: Path, doc: dict[str, Any]) -> ToolRun:
    run = ToolRun("vllm", str(path))
    for ours, theirs in (("ttft", "ttft"), ("itl", "itl"), ("tpot", "tpot"), ("e2e", "e2el")):
        stats = scaled(doc, {"p50": f"median_{theirs}_ms", "p90": f"p90_{theirs}_ms",
                             "p99": f"p99_{theirs}_ms", "mean": f"mean_{theirs}_ms"}, 1e-3)
        if stats:
            run.metrics[ours] = stats
    for ours, stat, theirs in (("output_tps", "value", "output_throughput"),
                               ("request_tps", "value", "request_throughput"),
                               ("output_tokens", "total", "total_output_tokens")):
        if number(doc.get(theirs)) is not None:
            run.metrics[ours] = {stat: float(doc[theirs])}
    ttfts, lens = doc.get("ttfts") or [], doc.get("output_lens") or []
    for k, ttft in enumerate(ttfts):
        run.requests.append(ToolRequest(None, None, ttft, None, None,
                                        lens[k] if k < len(lens) else None))
    return run
