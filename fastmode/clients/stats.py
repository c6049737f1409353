"""Bench statistics over recorded requests: pure functions, no clock, no I/O.

Definitions (all times in seconds):

- percentiles are nearest-rank (the smallest value with at least p% of the samples at or below
  it), as ``fastmode simulate`` computes them, plus the max and the mean;
- TTFT: request start -> first token event; end-to-end: request start -> end of the response;
- ITL: the gaps between consecutive tokens of one request, over all tokens of all requests
  (tokens that arrived in the same network chunk have a gap of 0);
- TPOT: (last token - first token) / (output tokens - 1); per-user tokens/s is its inverse;
- aggregate output tokens/s and requests/s: output tokens (completions) of the measured requests
  over the measured span, from the first measured start to the last measured end;
- goodput: the share (and rate) of measured requests that succeeded within ``slo_ttft`` and
  ``slo_tpot`` (an SLO left out is not checked);
- cost: the server's ``usage.cost_usd`` unless a price table is given ($/MTok per tier);
- tool-call validity: calls whose name was offered and whose arguments parse and fit the schema.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastmode.clients.records import RequestResult
from fastmode.clients.schema_check import check_tool_call, tool_schema

PCTS = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
KNOWN_TIERS = ("standard", "fast", "spark")


def tier_order(names: Iterable[str]) -> list[str]:
    """fastmode's tiers first (standard, fast, spark), then any others alphabetically."""
    rank = {t: i for i, t in enumerate(KNOWN_TIERS)}
    return sorted(set(names), key=lambda t: (rank.get(t, len(rank)), t))


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (``p`` in [0, 1])."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    return sorted_values[min(n - 1, max(0, math.ceil(p * n) - 1))]


def summary(values: Iterable[float]) -> dict[str, float | int | None]:
    """p50, p90, p99, min, max, mean and the count; ``None`` figures when there are none."""
    s = sorted(values)
    if not s:
        return {"p50": None, "p90": None, "p99": None, "min": None, "max": None, "mean": None,
                "n": 0}
    out: dict[str, float | int | None] = {k: percentile(s, p) for k, p in PCTS}
    out["min"] = s[0]
    out["max"] = s[-1]
    out["mean"] = math.fsum(s) / len(s)
    out["n"] = len(s)
    return out


def token_times(chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> list[float]:
    """One arrival time per token: each chunk's time repeated for the tokens it carried."""
    out: list[float] = []
    for t, n in zip(chunk_times, chunk_tokens, strict=True):
        out.extend([t] * n)
    return out


def itl_from_timestamps(times: Sequence[float]) -> list[float]:
    """Inter-token latencies: differences of consecutive token arrival times."""
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def chunk_itls(chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> list[float]:
    """ITL without expanding every token: a chunk of n tokens adds its gap and n - 1 zeros."""
    out: list[float] = []
    prev: float | None = None
    for t, n in zip(chunk_times, chunk_tokens, strict=True):
        if n <= 0:
            continue
        if prev is not None:
            out.append(t - prev)
        if n > 1:
            out.extend([0.0] * (n - 1))
        prev = t
    return out


def tpot(first: float, last: float, tokens: int) -> float | None:
    """Time per output token after the first; None for fewer than two tokens."""
    if tokens < 2 or last < first:
        return None
    return (last - first) / (tokens - 1)


def user_tokens_per_s(first: float, last: float, tokens: int) -> float | None:
    """A user's decode speed, (tokens - 1) / (last - first); None when undefined."""
    if tokens < 2 or last <= first:
        return None
    return (tokens - 1) / (last - first)


def meets_slo(
    r: RequestResult, slo_ttft: float | None, slo_tpot: float | None
) -> bool:
    if not r.ok:
        return False
    if slo_ttft is not None and (r.ttft is None or r.ttft > slo_ttft):
        return False
    if slo_tpot is not None:
        t = request_tpot(r)
        if t is not None and t > slo_tpot:
            return False
    return True


def request_tpot(r: RequestResult) -> float | None:
    if not r.chunk_times:
        return None
    return tpot(r.chunk_times[0], r.chunk_times[-1], r.tokens)


def request_user_tps(r: RequestResult) -> float | None:
    if not r.chunk_times:
        return None
    return user_tokens_per_s(r.chunk_times[0], r.chunk_times[-1], r.tokens)


# --------------------------------------------------------------------------- prices


@dataclass(frozen=True)
class Price:
    input: float  # $ per million prompt tokens
    output: float  # $ per million output tokens

    def cost(self, prompt: int, output: int) -> float:
        return (prompt * self.input + output * self.output) / 1e6


def parse_price_table(text: str) -> dict[str, Price]:
    """``standard=5:25,fast=30:150`` ($/MTok input:output per tier)."""
    table: dict[str, Price] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        inp, colon, out = value.partition(":")
        try:
            if not sep or not colon or not name.strip():
                raise ValueError
            price = Price(float(inp), float(out))
        except ValueError:
            raise ValueError(
                f"--price-table: expected TIER=INPUT:OUTPUT ($/MTok), got {part!r}"
            ) from None
        if price.input < 0 or price.output < 0:
            raise ValueError(f"--price-table: negative price in {part!r}")
        table[name.strip()] = price
    if not table:
        raise ValueError("--price-table: empty")
    return table


def request_cost(r: RequestResult, prices: Mapping[str, Price] | None) -> float | None:
    """The table's price for the served tier when a table is given, else ``usage.cost_usd``."""
    if prices is not None:
        price = prices.get(r.served_tier or r.tier) or prices.get(r.tier)
        if price is None:
            return None
        return price.cost(r.prompt_tokens or 0, r.tokens)
    return r.cost_usd


# --------------------------------------------------------------------------- tool calls


def tool_validity(results: Iterable[RequestResult]) -> dict[str, Any]:
    """Validity of the tool calls in successful requests that offered tools."""
    offered = calls = valid = no_call = 0
    reasons: Counter[str] = Counter()
    for r in results:
        if not r.tools or not r.ok:
            continue
        offered += 1
        if not r.tool_calls:
            no_call += 1
            continue
        schemas = tool_schema(r.tools)
        for call in r.tool_calls:
            calls += 1
            problem = check_tool_call(call.name, call.arguments, schemas)
            if problem is None:
                valid += 1
            else:
                reasons[problem[0]] += 1
    return {
        "requests_with_tools": offered,
        "requests_without_call": no_call,
        "calls": calls,
        "valid": valid,
        "validity_rate": valid / calls if calls else None,
        "invalid_by_reason": dict(sorted(reasons.items())),
    }


# --------------------------------------------------------------------------- summaries


def measured_window(
    results: Sequence[RequestResult], warmup: float, cooldown: float, send_end: float
) -> tuple[float, float]:
    """Start times [lo, hi] of the requests that count: after warm-up, before cool-down."""
    return warmup, max(warmup, send_end - cooldown) if cooldown > 0 else math.inf


def group_summary(
    results: Sequence[RequestResult],
    span: float,
    slo_ttft: float | None = None,
    slo_tpot: float | None = None,
    prices: Mapping[str, Price] | None = None,
) -> dict[str, Any]:
    """Every figure of one group of requests (a tier, or all); ``span`` for the rates."""
    ok = [r for r in results if r.ok]
    errors = Counter(r.error for r in results if r.error)
    itl: list[float] = []
    for r in ok:
        itl.extend(chunk_itls(r.chunk_times, r.chunk_tokens))
    ttft = [r.ttft for r in ok if r.ttft is not None]
    e2e = [r.end for r in ok if r.end is not None]
    tpots = [t for t in map(request_tpot, ok) if t is not None]
    tps = [t for t in map(request_user_tps, ok) if t is not None]
    out_tokens = sum(r.tokens for r in results)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    costs = [c for c in (request_cost(r, prices) for r in results) if c is not None]
    good = sum(1 for r in results if meets_slo(r, slo_ttft, slo_tpot))
    served = Counter(r.served_tier or r.tier for r in ok)
    rate = (lambda x: x / span) if span > 0 else (lambda x: None)
    return {
        "requests": len(results),
        "ok": len(ok),
        "errors": sum(errors.values()),
        "errors_by_kind": dict(sorted(errors.items())),
        "served_tiers": dict(sorted(served.items())),
        "ttft_s": summary(ttft),
        "itl_s": summary(itl),
        "tpot_s": summary(tpots),
        "e2e_s": summary(e2e),
        "user_tokens_per_s": summary(tps),
        "prompt_tokens": prompt_tokens,
        "output_tokens": out_tokens,
        "output_tokens_per_s": rate(out_tokens),
        "requests_per_s": rate(len(ok)),
        "goodput": {
            "slo_ttft_s": slo_ttft,
            "slo_tpot_s": slo_tpot,
            "requests": good,
            "share": good / len(results) if results else None,
            "requests_per_s": rate(good),
        },
        "cost_usd": {
            "total": math.fsum(costs) if costs else None,
            "per_request": math.fsum(costs) / len(costs) if costs else None,
            "per_million_output_tokens": (
                math.fsum(costs) / out_tokens * 1e6 if costs and out_tokens else None
            ),
            "priced_requests": len(costs),
            "source": "price_table" if prices is not None else "usage.cost_usd",
        },
        "tool_calls": tool_validity(results),
    }


def span_of(results: Sequence[RequestResult]) -> float:
    """From the first start to the last end (or start, for requests that never ended)."""
    if not results:
        return 0.0
    first = min(r.start for r in results)
    last = max(r.start + (r.end if r.end is not None else 0.0) for r in results)
    return max(0.0, last - first)


def summarise(
    results: Sequence[RequestResult],
    *,
    warmup: float = 0.0,
    cooldown: float = 0.0,
    send_end: float | None = None,
    slo_ttft: float | None = None,
    slo_tpot: float | None = None,
    prices: Mapping[str, Price] | None = None,
) -> dict[str, Any]:
    """Per-tier and overall figures of the measured requests, plus whole-run totals."""
    if send_end is None:
        send_end = max((r.start for r in results), default=0.0)
    lo, hi = measured_window(results, warmup, cooldown, send_end)
    measured = [r for r in results if lo <= r.start <= hi]
    span = span_of(measured)
    tiers = tier_order(r.tier for r in results)
    kw: dict[str, Any] = {"slo_ttft": slo_ttft, "slo_tpot": slo_tpot, "prices": prices}
    return {
        "window": {"start_s": lo, "end_s": hi if math.isfinite(hi) else None, "span_s": span,
                   "measured_requests": len(measured), "excluded_requests": len(results) - len(measured)},
        "tiers": {t: group_summary([r for r in measured if r.tier == t], span, **kw) for t in tiers},
        "overall": group_summary(measured, span, **kw),
        "totals": run_totals(results),
    }


def run_totals(results: Sequence[RequestResult]) -> dict[str, Any]:
    """Counts over the whole run (warm-up and cool-down included), by the tier that served.

    These are what a server's own counters see (e.g. fastmode's /metrics).
    """
    sent: Counter[str] = Counter(r.tier for r in results)
    ok: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for r in results:
        if r.ok:
            served = r.served_tier or r.tier
            ok[served] += 1
            tokens[served] += r.tokens
        else:
            kind = r.error or "?"
            errors[kind] += 1
            examples.setdefault(kind, r.detail or "")
    return {
        "requests": len(results),
        "ok": sum(ok.values()),
        "errors": sum(errors.values()),
        "errors_by_kind": dict(sorted(errors.items())),
        "error_examples": dict(sorted(examples.items())),
        "sent_by_tier": dict(sorted(sent.items())),
        "ok_by_served_tier": dict(sorted(ok.items())),
        "output_tokens_by_served_tier": dict(sorted(tokens.items())),
        "downgraded": sum(1 for r in results if r.ok and r.served_tier and r.served_tier != r.tier),
    }
