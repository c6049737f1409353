"""A tool's figures against the server's, metric by metric, with the likely reason for a gap.

The server's figure for each metric is computed over the same requests the tool measured: the
traces joined to the tool's records by the request id it sent (``x-request-id``) or the body's
id it kept, else all the traces given (``--since`` selects a run). A tool that exports ids none
of which is traced is not compared at all (``NothingCompared``). A figure is *right* within
``rel`` (2% by default) or ``abs`` (1 ms for TTFT and E2E, a tenth for ITL and TPOT) of the
server's; TTFT and E2E are also right within that of the server's plus each request's measured
client time (``overhead``), and the row says how much of the gap is the client's. When a tool
is off past that, the server's *wrong variants* (``truth``) are tried: the one the tool matches
names the reason; else the tool's own file may say (``ToolRun.hints``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from fastmode.clients.verify import clock, overhead
from fastmode.clients.verify.records import ToolRequest, ToolRun
from fastmode.clients.verify.truth import Truth

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


_READ_GAPS = ("its gaps as it read each token, every one after the server sent it: "
              "the reading's jitter")

ITL_OVER = {"token": "per token", "request": "per-request means (TPOT)",
            "request-per-token": "each request's mean once per token"}


def server_metrics(truths: list[Truth], method: str = "linear", itl_over: str = "token"
                   ) -> dict[str, dict[str, dict[str, float]]]:
    """{metric: {variant: stats}}; the variant ``right`` is the one a tool should report.
    ``itl_over``: what the tool's ITL distribution is over by its own definition (``ToolRun``):
    the server's is computed so, and the other ways are variants."""

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
    itl_req_tok = [t.tpot for t in truths if t.tpot is not None
                   for _ in range(t.output_tokens - 1)]
    itls = {"token": summarize(itl), "request": summarize(itl_req),
            "request-per-token": summarize(itl_req_tok)}
    itl_variants = {"right": itls[itl_over], "per event, not per token": summarize(itl_event)}
    itl_variants.update({ITL_OVER[k]: v for k, v in itls.items() if k != itl_over})
    out: dict[str, dict[str, dict[str, float]]] = {
        "ttft": {"right": summarize(ttft), "first byte (an event without tokens)":
                 summarize([t.ttfb for t in truths])},
        "itl": itl_variants,
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
    # the client's measured time at this stat (TTFT, E2E: ``overhead``), None where unknown
    client: float | None = None


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


class NothingCompared(ValueError):
    """Nothing to judge: no request joined, or no figure the server can recompute."""


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
            abs_ms: float = 1.0, strict: bool = False) -> Verdict:
    """The verdict per metric and stat. TTFT and E2E are also compared with the server's
    figure plus each request's measured client time (``overhead``): within tolerance of that,
    a row is ok unless ``strict``, and its *why* gives the client's share."""
    abs_s = abs_ms / 1000
    mine, pairs = join(run, truths)
    if run.has_ids and not pairs:
        raise NothingCompared(
            f"none of the tool's {len(run.requests)} requests is in the {len(truths)} traces "
            "(joined 0 by request id or body id): the traces of another run? (--since)")
    v = Verdict(run.tool, run.source, len(run.requests), len(truths), len(pairs),
                findings=list(run.notes))
    if not pairs:
        v.findings.append(f"no per-request ids: compared with all {len(truths)} traces given")
    server = server_metrics(mine, run.percentiles, run.itl)
    if run.itl != "token" and "itl" in run.metrics:
        tokens = server["itl"]["per token"]
        v.findings.append(
            f"ITL: {run.tool}'s distribution is {ITL_OVER[run.itl]} (its definition), so the "
            "server's is computed that way; the tokens' own gaps have p99 "
            f"{1000 * tokens.get('p99', 0.0):.2f} ms")
    if run.clock == "monotonic":
        pairs, note = clock.align(pairs)
        if note:
            v.findings.append(f"{run.tool}: {note}")
    _tool_counts(server, pairs, mine)
    if run.clock != "monotonic":  # (a start clock of its own origin is not comparable)
        _tool_clock(server, pairs, run.percentiles, run.tpot)
    clients = {m: overhead.client_times(m, pairs) for m in ("ttft", "e2e")}
    gaps = clock.read_gaps(pairs) if run.itl == "token" else None
    for metric, stats in run.metrics.items():
        variants = server.get(metric)
        if not variants:
            continue
        # the floor is for what a client adds to a latency (loopback, parsing): whole for TTFT
        # and E2E, a tenth of it for the per-token figures
        tol = abs_s if metric in ("ttft", "e2e") else abs_s / 10 if metric in LATENCIES else 0.0
        times = clients.get(metric) or []
        seen = _summarize(overhead.as_the_client_sees(times), run.percentiles) \
            if times and len(times) == len(pairs) else {}
        if metric == "itl" and gaps:  # each token's gap as the tool read it
            seen = _summarize(gaps, run.percentiles)
        for stat, value in stats.items():
            truth = variants["right"].get(stat)
            if truth is None:
                continue
            row = Row(metric, stat, value, truth, value - truth,
                      (value - truth) / truth if truth else None, _close(value, truth, rel, tol))
            if stat in seen:
                row.client = seen[stat] - truth
            if not row.ok and stat in seen and _close(value, seen[stat], rel, tol):
                row.ok = not strict
                row.why = (f"the client's own {1000 * row.client:+.2f} ms "  # type: ignore[operator]
                           f"({overhead.summary(times) if times else _READ_GAPS})")
            elif not row.ok:
                row.why = _why(metric, stat, value, variants, rel, tol) or _shifted(
                    metric, stat, value, variants, rel, tol, overhead.before(times)) or \
                    run.hints.get(metric, "") or _unexplained(row, seen.get(stat))
            v.rows.append(row)
    if not v.rows:
        raise NothingCompared(f"{run.source}: none of the {run.tool} figures "
                              f"({', '.join(run.metrics) or 'none'}) has a server counterpart")
    for metric, times in clients.items():
        v.findings += overhead.findings(metric, times)
    v.findings += _per_request(pairs)
    return v


def _shifted(metric: str, stat: str, value: float, variants: dict[str, dict[str, float]],
             rel: float, tol: float, before: float) -> str:
    """A wrong variant once the time the tool's clock runs before the arrival is taken off."""
    if not before:
        return ""
    why = _why(metric, stat, value - before, variants, rel, tol)
    return f"{why} (after its clock's {1000 * before:.2f} ms before the arrival)" if why else ""


def _unexplained(row: Row, seen: float | None) -> str:
    if seen is None:
        return ""
    return (f"not the client's time: with its measured {1000 * (seen - row.server):+.2f} ms "
            f"the tool is still {1000 * (row.tool - seen):+.2f} ms off (its formula)")


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


def _tool_clock(server: dict[str, dict[str, dict[str, float]]],
                pairs: list[tuple[ToolRequest, Truth]], method: str, definition: str) -> None:
    """The TPOT with the first token's wait in it, from the *tool's* start clock: guidellm's
    definition, ``(last token - request start) / N`` with its own ``request_start``, each
    request's value weighted by its N tokens. For a tool that defines TPOT so
    (``ToolRun.tpot == "from-start"``) it is the right figure and the gaps' TPOT a variant;
    for the others, a variant that names the mistake."""
    counted = [((t.last_token - r.start) / t.output_tokens, t.output_tokens) for r, t in pairs
               if r.start is not None and t.last_token is not None and t.output_tokens]
    if not counted or "tpot" not in server:
        return
    name = "(last token - the tool's start) / N, TTFT included"
    if definition != "from-start":
        server["tpot"][name] = _summarize([v for v, _ in counted], method)
        return
    weighted = [v for v, n in counted for _ in range(n)]
    gaps = server["tpot"].pop("right")
    server["tpot"] = {"right": _summarize(weighted, method),
                      "(last - first token) / (N - 1): the TTFT left out": gaps,
                      f"{name}, one value per request (not weighted by N)":
                      _summarize([v for v, _ in counted], method),
                      **server["tpot"]}


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


def _per_request(pairs: list[tuple[ToolRequest, Truth]]) -> list[str]:
    """Output tokens counted differently by the tool on the joined requests."""
    toks = [(r.output_tokens, t.output_tokens) for r, t in pairs if r.output_tokens is not None]
    diff = [(a, b) for a, b in toks if a != b]
    if not diff:
        return []
    a = sum(x for x, _ in toks)
    b = sum(y for _, y in toks)
    return [f"output tokens: the tool counted {a} where the server sent {b} "
            f"({100 * (a - b) / b:+.1f}%) on {len(diff)} of {len(toks)} requests: it counts "
            "with its own tokenizer; per-token figures (ITL, TPOT, tok/s) scale by that ratio"]
