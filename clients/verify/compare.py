"""A tool's figures against the server's, metric by metric, with the likely reason for a gap.

The server's figure for each metric is computed over the same requests the tool measured: the
traces joined to the tool's records by the request id it sent (``x-request-id``), else the
traces given (``--since`` selects a run). A tool's figure is *right* when it is within the
tolerance of the server's: ``rel`` (2% by default) or ``abs`` (1 ms for TTFT and E2E, a tenth for
ITL and TPOT: the loopback and the tool's parsing are part of what a client measures). When a tool is off,
the server's *wrong variants* (``truth``) are tried: the one the tool matches names the reason.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from .tools import ToolRequest, ToolRun
from .truth import Truth

LATENCIES = ("ttft", "itl", "tpot", "e2e")


def percentile(xs: list[float], q: float, method: str = "linear") -> float | None:
    """``linear``: interpolation between closest ranks (numpy's default: aiperf, vLLM, our
    bench); ``nearest``: the value at rank ceil(q·n) (guidellm). On a few samples the two differ
    by a whole gap, so the server's figure is computed the tool's way."""
    if not xs:
        return None
    s = sorted(xs)
    if method == "nearest":
        return s[max(0, math.ceil(q / 100 * len(s)) - 1)]
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(xs: list[float]) -> dict[str, float]:
    return _summarize(xs)


def _summarize(xs: list[float], method: str = "linear") -> dict[str, float]:
    if not xs:
        return {}
    out = {f"p{q}": percentile(xs, q, method) for q in (50, 90, 99)}
    return {**{k: v for k, v in out.items() if v is not None}, "mean": statistics.fmean(xs)}


def server_metrics(truths: list[Truth], method: str = "linear"
                   ) -> dict[str, dict[str, dict[str, float]]]:
    """{metric: {variant: stats}}; the variant ``right`` is the one a tool should report."""

    def summarize(xs: list[float]) -> dict[str, float]:
        return _summarize(xs, method)

    ttft = [t.ttft for t in truths if t.ttft is not None]
    tpot = [t.tpot for t in truths if t.tpot is not None]
    by_n = [t.tpot_by_n for t in truths if t.tpot_by_n is not None]
    with_ttft = [(t.last_token - t.arrival) / t.output_tokens for t in truths
                 if t.last_token is not None and t.output_tokens]
    itl = [x for t in truths for x in t.itl()]
    itl_event = [x for t in truths for x in t.itl_event()]
    itl_req = [t.tpot for t in truths if t.tpot is not None]  # a per-request mean ITL
    out: dict[str, dict[str, dict[str, float]]] = {
        "ttft": {"right": summarize(ttft), "first byte (an event without tokens)":
                 summarize([t.ttfb for t in truths])},
        "itl": {"right": summarize(itl), "per event, not per token": summarize(itl_event),
                "per-request means (TPOT)": summarize(itl_req)},
        "tpot": {"right": summarize(tpot), "divides by N, not N-1": summarize(by_n),
                 "(last token - arrival) / N, TTFT included": summarize(with_ttft)},
        "e2e": {"right": summarize([t.e2e for t in truths])},
    }
    if truths:
        span = max(t.last_byte for t in truths) - min(t.arrival for t in truths)
        tokens = sum(t.output_tokens for t in truths)
        out["output_tps"] = {"right": {"value": tokens / span if span > 0 else 0.0}}
        out["request_tps"] = {"right": {"value": len(truths) / span if span > 0 else 0.0}}
        out["output_tokens"] = {"right": {"total": float(tokens)}}
    return out


@dataclass
class Row:
    metric: str
    stat: str
    tool: float
    server: float
    error: float  # tool - server
    rel: float | None  # error / server
    ok: bool
    why: str = ""


@dataclass
class Verdict:
    tool: str
    source: str
    requests_tool: int
    requests_server: int
    joined: int
    rows: list[Row] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _close(a: float, b: float, rel: float, abs_s: float) -> bool:
    return abs(a - b) <= max(rel * abs(b), abs_s)


def join(run: ToolRun, truths: list[Truth]) -> tuple[list[Truth], list[tuple[ToolRequest, Truth]]]:
    """The traces of the tool's requests (by the id it sent, ``x-request-id``, or the id of the
    body it got) and the joined pairs; all the traces if the tool exports no id the server
    knows."""
    by_id = {t.client_request_id: t for t in truths if t.client_request_id}
    by_id.update({t.response_id: t for t in truths if t.response_id})
    pairs = [(r, by_id[key]) for r in run.requests
             for key in [r.request_id if r.request_id in by_id else r.response_id] if key in by_id]
    if pairs:
        return [t for _, t in pairs], pairs
    return truths, []


def compare(run: ToolRun, truths: list[Truth], rel: float = 0.02,
            abs_ms: float = 1.0) -> Verdict:
    abs_s = abs_ms / 1000
    mine, pairs = join(run, truths)
    v = Verdict(run.tool, run.source, len(run.requests), len(truths), len(pairs),
                findings=list(run.notes))
    server = server_metrics(mine, run.percentiles)
    _tool_counts(server, pairs, mine)
    for metric, stats in run.metrics.items():
        variants = server.get(metric)
        if not variants:
            continue
        # the floor is for what a client adds to a latency (loopback, parsing): whole for TTFT
        # and E2E, a tenth of it for the per-token figures
        tol = abs_s if metric in ("ttft", "e2e") else abs_s / 10 if metric in LATENCIES else 0.0
        for stat, value in stats.items():
            truth = variants["right"].get(stat)
            if truth is None:
                continue
            ok = _close(value, truth, rel, tol)
            why = "" if ok else _why(metric, stat, value, variants, rel, tol)
            v.rows.append(Row(metric, stat, value, truth, value - truth,
                              (value - truth) / truth if truth else None, ok, why))
    v.findings += _per_request(pairs, abs_s)
    offset = _start_offset(pairs)
    for row in v.rows:
        if not row.ok and not row.why and row.metric in ("ttft", "e2e") and offset is not None:
            row.why = (f"its clock starts {1000 * offset:.2f} ms (median) before the request "
                       "reaches the server")
    return v


def _tool_counts(server: dict[str, dict[str, dict[str, float]]],
                 pairs: list[tuple[ToolRequest, Truth]], mine: list[Truth]) -> None:
    """Variants with the server's times and the *tool's* token counts (a tool that counts the
    text's tokens with its own tokenizer instead of reading the usage)."""
    counted = [(r.output_tokens, t) for r, t in pairs
               if r.output_tokens and r.output_tokens > 1 and t.first_token is not None
               and t.last_token is not None]
    if not counted:
        return
    name = "per request, with the tool's token counts"
    per = [(t.last_token - t.first_token) / (n - 1) for n, t in counted]  # type: ignore[operator]
    for metric in ("itl", "tpot"):
        if metric in server:
            server[metric][name] = _summarize(per)
    span = max(t.last_byte for t in mine) - min(t.arrival for t in mine)
    if span > 0 and "output_tps" in server:
        server["output_tps"]["output tokens as the tool counted them"] = {
            "value": sum(n for n, _ in counted) / span}


def _why(metric: str, stat: str, value: float, variants: dict[str, dict[str, float]],
         rel: float, tol: float) -> str:
    for name, stats in variants.items():
        if name != "right" and stat in stats and _close(value, stats[stat], rel, tol):
            return f"matches the server's {name}"
    if metric in ("output_tps", "request_tps"):
        return "its duration is not the span from the first arrival to the last byte"
    if metric == "output_tokens":
        return "counts tokens itself (its tokenizer), not the server's usage"
    return ""


def _start_offset(pairs: list[tuple[ToolRequest, Truth]]) -> float | None:
    """The median of (the tool's TTFT − the server's), when the tool exports it per request."""
    d = [(r.ttft - t.ttft) for r, t in pairs if r.ttft is not None and t.ttft is not None]
    return statistics.median(d) if d else None


def _per_request(pairs: list[tuple[ToolRequest, Truth]], abs_s: float) -> list[str]:
    """What the joined requests show: a constant offset (the clock starts before the request
    reaches the server), and output tokens counted differently."""
    out: list[str] = []
    ttft = [(r.ttft - t.ttft) for r, t in pairs if r.ttft is not None and t.ttft is not None]
    if ttft:
        med = statistics.median(ttft)
        if abs(med) > abs_s:
            out.append(f"TTFT per request: the tool's is {1000 * med:+.2f} ms off the server's "
                       f"(median of {len(ttft)}; max {1000 * max(ttft, key=abs):+.2f} ms): "
                       "its clock starts before the request reaches the server (connecting, "
                       "sending, its own scheduling), or stops after the first token left it")
    start = [(t.arrival - r.start) for r, t in pairs if r.start is not None]
    if start:
        out.append(f"the tool's start clock is {1000 * statistics.median(start):.2f} ms "
                   f"(median; max {1000 * max(start):.2f} ms) before the server's arrival")
    toks = [(r.output_tokens, t.output_tokens) for r, t in pairs if r.output_tokens is not None]
    diff = [(a, b) for a, b in toks if a != b]
    if diff:
        a = sum(x for x, _ in toks)
        b = sum(y for _, y in toks)
        out.append(f"output tokens: the tool counted {a} where the server sent {b} "
                   f"({100 * (a - b) / b:+.1f}%) on {len(diff)} of {len(toks)} requests: it "
                   "counts with its own tokenizer; per-token figures (ITL, TPOT, tok/s) scale "
                   "by that ratio")
    return out
