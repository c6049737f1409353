"""Metric arithmetic on synthetic requests: percentiles, ITL, TPOT, goodput, cost, tool calls."""

from __future__ import annotations

from array import array

import pytest

from fastmode.clients.records import RequestResult, ToolCallRecord
from fastmode.clients.schema_check import check_tool_call, check_value, tool_schema
from fastmode.clients.stats import (
    Price,
    chunk_itls,
    group_summary,
    itl_from_timestamps,
    meets_slo,
    parse_price_table,
    percentile,
    request_cost,
    summarise,
    summary,
    tier_order,
    token_times,
    tpot,
    user_tokens_per_s,
)
from fastmode.clients.workload import BENCH_TOOLS


def req(
    index: int = 0,
    tier: str = "standard",
    start: float = 0.0,
    ttft: float = 0.1,
    gaps: list[float] | None = None,
    tokens: int | None = None,
    error: str | None = None,
    cost: float | None = None,
    **kw,
) -> RequestResult:
    """A request whose tokens arrive at ttft, then after each gap (one token per chunk)."""
    gaps = [0.01] * 9 if gaps is None else gaps
    times = [ttft]
    for g in gaps:
        times.append(times[-1] + g)
    r = RequestResult(index, tier, start, error=error, cost_usd=cost, **kw)
    if error is None:
        r.ttft = ttft
        r.chunk_times = array("d", times)
        r.chunk_tokens = array("l", [1] * len(times))
        r.events = len(times)
        r.output_tokens = tokens if tokens is not None else len(times)
        r.end = times[-1] + 0.001
        r.prompt_tokens = 100
    return r


# --------------------------------------------------------------------------- percentiles


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 0.50) == 50
    assert percentile(values, 0.90) == 90
    assert percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([1, 2, 3, 4], 0.5) == 2  # ceil(0.5*4) = 2nd value
    assert percentile([1, 2, 3, 4, 5], 0.5) == 3
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_summary_of_unsorted_values_and_of_nothing():
    s = summary([5.0, 1.0, 4.0, 2.0, 3.0])
    assert s["p50"] == 3.0 and s["p90"] == 5.0 and s["p99"] == 5.0
    assert s["min"] == 1.0 and s["max"] == 5.0 and s["mean"] == 3.0 and s["n"] == 5
    empty = summary([])
    assert empty["n"] == 0 and all(empty[k] is None for k in ("p50", "p90", "p99", "max", "mean"))


def test_p99_catches_a_single_slow_request_in_a_hundred():
    values = [0.02] * 99 + [2.0]
    s = summary(values)
    assert s["p50"] == 0.02 and s["p99"] == 0.02 and s["max"] == 2.0
    values = [0.02] * 98 + [2.0, 2.0]
    assert summary(values)["p99"] == 2.0


# --------------------------------------------------------------------------- ITL / TPOT


def test_itl_from_timestamps():
    assert itl_from_timestamps([]) == []
    assert itl_from_timestamps([1.0]) == []
    got = itl_from_timestamps([1.0, 1.5, 1.75, 2.75])
    assert got == pytest.approx([0.5, 0.25, 1.0])


def test_chunk_itls_gives_zero_gaps_inside_a_chunk():
    # chunks at 0.1 (1 token), 0.2 (3 tokens), 0.5 (1 token)
    times, counts = [0.1, 0.2, 0.5], [1, 3, 1]
    expanded = token_times(times, counts)
    assert expanded == [0.1, 0.2, 0.2, 0.2, 0.5]
    assert chunk_itls(times, counts) == pytest.approx(itl_from_timestamps(expanded))
    assert sorted(chunk_itls(times, counts)) == pytest.approx([0.0, 0.0, 0.1, 0.3])
    # a first chunk carrying several tokens contributes zeros, not a gap from the start
    assert chunk_itls([0.3, 0.4], [2, 1]) == pytest.approx([0.0, 0.1])
    assert chunk_itls([], []) == []


def test_tpot_and_user_speed():
    assert tpot(0.1, 1.1, 11) == pytest.approx(0.1)
    assert user_tokens_per_s(0.1, 1.1, 11) == pytest.approx(10.0)
    assert tpot(0.1, 0.1, 1) is None and user_tokens_per_s(0.1, 0.1, 1) is None
    assert user_tokens_per_s(0.2, 0.2, 5) is None  # all in one chunk: undefined, not infinite


def test_group_summary_on_synthetic_stream():
    # 10 tokens per request: ttft 0.1 s then 9 gaps of 10 ms -> TPOT 10 ms, 100 tok/s per user
    rs = [req(i, start=i * 0.5) for i in range(10)]
    g = group_summary(rs, span=10.0)
    assert g["requests"] == g["ok"] == 10 and g["errors"] == 0
    assert g["ttft_s"]["p50"] == pytest.approx(0.1)
    assert g["itl_s"]["n"] == 90 and g["itl_s"]["p99"] == pytest.approx(0.01)
    assert g["tpot_s"]["p50"] == pytest.approx(0.01)
    assert g["user_tokens_per_s"]["p50"] == pytest.approx(100.0)
    assert g["output_tokens"] == 100
    assert g["output_tokens_per_s"] == pytest.approx(10.0)
    assert g["requests_per_s"] == pytest.approx(1.0)
    assert g["e2e_s"]["max"] == pytest.approx(0.1 + 0.09 + 0.001)


def test_usage_tokens_override_event_count():
    # a server packing 2 tokens per event: usage says 20 tokens over 10 events
    r = req(tokens=20)
    assert r.tokens == 20 and r.events == 10
    g = group_summary([r], span=1.0)
    assert g["output_tokens"] == 20
    assert g["tpot_s"]["p50"] == pytest.approx(0.09 / 19)


# --------------------------------------------------------------------------- goodput


def test_goodput_against_ttft_and_tpot_slos():
    fast_start = req(0, ttft=0.05)  # tpot 10 ms
    slow_start = req(1, ttft=0.5)
    slow_decode = req(2, ttft=0.05, gaps=[0.05] * 9)  # tpot 50 ms
    failed = req(3, error="http_503")
    rs = [fast_start, slow_start, slow_decode, failed]
    g = group_summary(rs, span=2.0, slo_ttft=0.2, slo_tpot=0.02)
    assert g["goodput"]["requests"] == 1
    assert g["goodput"]["share"] == pytest.approx(0.25)
    assert g["goodput"]["requests_per_s"] == pytest.approx(0.5)
    # only a TTFT SLO: the slow decoder passes
    assert group_summary(rs, span=2.0, slo_ttft=0.2)["goodput"]["requests"] == 2
    # no SLO: every successful request counts
    assert group_summary(rs, span=2.0)["goodput"]["requests"] == 3
    # boundaries are inclusive; one-token replies have no TPOT and pass a TPOT SLO
    assert meets_slo(req(ttft=0.2), 0.2, None)
    assert meets_slo(req(gaps=[]), None, 0.001)
    assert not meets_slo(failed, None, None)


# --------------------------------------------------------------------------- window


def test_warmup_and_cooldown_exclude_requests_by_start_time():
    rs = [req(i, start=float(i)) for i in range(10)]  # starts 0..9 s
    s = summarise(rs, warmup=2.0, cooldown=3.0, send_end=10.0)
    starts = [r.start for r in rs if 2.0 <= r.start <= 7.0]
    assert s["window"]["measured_requests"] == len(starts) == 6
    assert s["window"]["excluded_requests"] == 4
    assert s["overall"]["requests"] == 6
    # whole-run totals still count everything (what the server's counters see)
    assert s["totals"]["requests"] == 10 and s["totals"]["ok_by_served_tier"] == {"standard": 10}
    # the span runs from the first measured start to the last measured end
    assert s["window"]["span_s"] == pytest.approx(7.0 + 0.191 - 2.0)


def test_summarise_groups_by_requested_tier_and_counts_served_tiers():
    rs = [req(0, "standard"), req(1, "fast", served_tier="standard"), req(2, "spark"),
          req(3, "fast", served_tier="fast"), req(4, "fast", error="http_429", detail="full")]
    s = summarise(rs)
    assert list(s["tiers"]) == ["standard", "fast", "spark"]
    assert s["tiers"]["fast"]["requests"] == 3 and s["tiers"]["fast"]["ok"] == 2
    assert s["tiers"]["fast"]["served_tiers"] == {"fast": 1, "standard": 1}
    assert s["tiers"]["fast"]["errors_by_kind"] == {"http_429": 1}
    t = s["totals"]
    assert t["ok_by_served_tier"] == {"fast": 1, "spark": 1, "standard": 2}
    assert t["output_tokens_by_served_tier"]["standard"] == 20
    assert t["downgraded"] == 1
    assert t["errors_by_kind"] == {"http_429": 1} and t["error_examples"] == {"http_429": "full"}


def test_tier_order():
    assert tier_order(["spark", "zeta", "fast", "alpha", "standard"]) == [
        "standard", "fast", "spark", "alpha", "zeta"]


# --------------------------------------------------------------------------- cost


def test_cost_from_usage_and_from_a_price_table():
    a = req(0, "standard", cost=0.002)
    b = req(1, "fast", cost=0.010, served_tier="fast")
    g = group_summary([a, b], span=1.0)
    assert g["cost_usd"]["total"] == pytest.approx(0.012)
    assert g["cost_usd"]["per_request"] == pytest.approx(0.006)
    assert g["cost_usd"]["source"] == "usage.cost_usd"
    table = parse_price_table("standard=5:25, fast=30:150")
    assert table["fast"] == Price(30.0, 150.0)
    # 100 prompt + 10 output tokens
    assert request_cost(a, table) == pytest.approx((100 * 5 + 10 * 25) / 1e6)
    assert request_cost(b, table) == pytest.approx((100 * 30 + 10 * 150) / 1e6)
    assert request_cost(req(tier="other"), table) is None
    g = group_summary([a, b], span=1.0, prices=table)
    assert g["cost_usd"]["source"] == "price_table"
    assert g["cost_usd"]["per_million_output_tokens"] == pytest.approx(
        g["cost_usd"]["total"] / 20 * 1e6)
    assert group_summary([req()], span=1.0)["cost_usd"]["total"] is None


@pytest.mark.parametrize("bad", ["", "standard", "standard=5", "standard=a:b", "=1:2",
                                 "standard=-1:2"])
def test_bad_price_tables(bad):
    with pytest.raises(ValueError, match="price-table"):
        parse_price_table(bad)


# --------------------------------------------------------------------------- tool calls


def test_tool_call_validity_counts_each_kind_of_mistake():
    schemas = tool_schema(BENCH_TOOLS)
    assert check_tool_call("get_weather", '{"city":"Paris"}', schemas) is None
    assert check_tool_call("get_weather", '{"city":"Paris","unit":"celsius"}', schemas) is None
    assert check_tool_call("get_weather", '{"city":"Par', schemas)[0] == "malformed_json"
    assert check_tool_call("fetch_weather", '{"city":"Paris"}', schemas)[0] == "unknown_tool"
    assert check_tool_call("search_docs", '{"query":"x"}', schemas)[0] == "missing_required"
    assert check_tool_call("get_weather", '{"city":"P","verbose":true}', schemas)[0] == (
        "unexpected_property")
    assert check_tool_call("get_weather", '{"city":"P","unit":"kelvin"}', schemas)[0] == (
        "not_in_enum")
    assert check_tool_call("search_docs", '{"query":"x","max_results":"3"}', schemas)[0] == (
        "wrong_type")
    assert check_tool_call("search_docs", '{"query":"x","max_results":99}', schemas)[0] == (
        "out_of_range")

    def with_calls(i: int, *calls: tuple[str, str]) -> RequestResult:
        r = req(i, "spark", tools=BENCH_TOOLS)
        r.tool_calls = [ToolCallRecord(n, a) for n, a in calls]
        return r

    rs = [
        with_calls(0, ("get_weather", '{"city":"Paris"}')),
        with_calls(1, ("get_weather", '{"city":')),
        with_calls(2, ("create_ticket", '{"title":"t","priority":"high","labels":["a"]}')),
        with_calls(3),  # tools offered, answered in text
        req(4),  # no tools offered: not counted
    ]
    v = group_summary(rs, span=1.0)["tool_calls"]
    assert v["requests_with_tools"] == 4 and v["requests_without_call"] == 1
    assert v["calls"] == 3 and v["valid"] == 2
    assert v["validity_rate"] == pytest.approx(2 / 3)
    assert v["invalid_by_reason"] == {"malformed_json": 1}


def test_schema_checker_keywords():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "exclusiveMinimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "mode": {"anyOf": [{"const": "a"}, {"type": "null"}]},
            "x": {"type": ["number", "null"]},
        },
        "additionalProperties": {"type": "string"},
    }
    assert check_value({"n": 1, "tags": ["a"], "mode": None, "x": 1.5, "other": "s"}, schema) is None
    assert check_value({"n": 0}, schema)[0] == "out_of_range"
    assert check_value({"n": True}, schema)[0] == "wrong_type"  # a bool is not an integer
    assert check_value({"n": 2.0}, schema) is None  # 2.0 is an integer in JSON schema
    assert check_value({"tags": []}, schema)[0] == "length"
    assert check_value({"tags": [1]}, schema)[0] == "wrong_type"
    assert check_value({"mode": "b"}, schema)[0] == "no_branch"
    assert check_value({"other": 3}, schema)[0] == "wrong_type"
    assert check_value([], {"type": "object"})[0] == "wrong_type"
