"""The fast-share sweep has one JSON shape, simulated or measured, and one table row reading it.

``fastmode simulate --scenario fast-share --json`` and ``fastmode bench --scenario fast-share``
both write ``{"points": [{"fast_share", "tiers": {tier: figures}, "fleet": ...}]}`` with the
simulator's per-tier keys; ``workload.sweep.sweep_row`` reads either.
"""

from __future__ import annotations

import json
from array import array

import pytest

from fastmode.cli import main
from fastmode.clients.records import RequestResult
from fastmode.clients.scenarios import fleet_delta, tier_figures
from fastmode.clients.stats import summarise
from fastmode.workload import WorkloadError
from fastmode.workload.sweep import parse_shares, sweep_mix, sweep_row

ROW_KEYS = {"ttft_s", "output_tokens_per_s_per_user_p50", "output_tokens_per_s", "rejected",
            "requests", "cost_usd"}


def measured(index: int, tier: str, ttft: float, end: float, tokens: int) -> RequestResult:
    times = array("d", [ttft + (end - ttft) * k / (tokens - 1) for k in range(tokens)])
    return RequestResult(index, tier, float(index), status=200, end=end, ttft=ttft,
                         chunk_times=times, chunk_tokens=array("l", [1] * tokens),
                         output_tokens=tokens, prompt_tokens=100, cost_usd=0.001)


def test_simulate_writes_the_sweep_document(capsys) -> None:
    assert main(["simulate", "--scenario", "fast-share", "--shares", "0,50",
                 "--duration", "30", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["fast_share"] for p in doc["points"]] == [0.0, 0.5]
    p0, p50 = doc["points"]
    assert set(p0["tiers"]) == {"standard"} and set(p50["tiers"]) == {"standard", "fast"}
    for p in doc["points"]:
        assert {"fast_share", "mix", "tiers", "fleet"} <= set(p)
        for figures in p["tiers"].values():
            assert ROW_KEYS <= set(figures)
        assert {"nodes", "pools", "node_hours", "cost_usd", "revenue_usd"} <= set(p["fleet"])
    row = sweep_row(p50)
    assert row["fast_ttft_p50_s"] == p50["tiers"]["fast"]["ttft_s"]["p50"]
    assert row["replicas"]["standard"] == p50["fleet"]["pools"]["standard"]["replicas_mean"]
    assert row["node_hours"] == p50["fleet"]["node_hours"]


def test_the_bench_measures_the_same_keys() -> None:
    results = [measured(i, "standard", 0.05, 1.0, 20) for i in range(4)]
    results += [measured(10 + i, "fast", 0.08, 0.5, 20) for i in range(2)]
    summary = summarise(results)
    tiers = {t: tier_figures(g) for t, g in summary["tiers"].items()}
    for figures in tiers.values():
        assert ROW_KEYS <= set(figures)
        assert set(figures["ttft_s"]) >= {"p50", "p90", "p99"}
    assert tiers["standard"]["completed"] == 4 and tiers["standard"]["rejected"] == 0
    assert tiers["fast"]["output_tokens_per_s_per_user_p50"] == pytest.approx(19 / 0.42)
    row = sweep_row({"fast_share": 0.3, "tiers": tiers, "fleet": None})
    assert row["standard_ttft_p50_s"] == pytest.approx(0.05)
    assert row["node_hours"] is None and row["replicas"] == {}


def test_the_fleet_of_a_live_point_is_the_difference_of_two_states() -> None:
    def state(active: int, hours: float, cost: float, users: float, tenants: float) -> dict:
        return {"fleet": {
            "policy": "proportional",
            "pools": {"standard": {"active": 4, "pending": 0}, "fast": {"active": active,
                                                                       "pending": 0}},
            "nodes": {"b200": {"paid": 10, "count": 10, "max_count": 10}},
            "node_hours": hours, "provider_cost_usd": cost,
            "revenue_usd": {"users": users, "tenants": tenants}}}

    fleet = fleet_delta(state(4, 1.0, 44.0, 2.0, 100.0), state(5, 1.5, 66.0, 3.0, 160.0))
    assert fleet is not None
    assert fleet["pools"]["fast"] == {"replicas_start": 4, "replicas_end": 5,
                                      "replicas_mean": 4.5, "pending": 0}
    assert fleet["node_hours"] == pytest.approx(0.5) and fleet["cost_usd"] == pytest.approx(22)
    assert fleet["revenue_usd"] == {"users": 1.0, "tenants": 60.0, "total": 61.0}
    assert fleet_delta(None, state(4, 1, 1, 1, 1)) is None  # not a fastmode server


def test_shares_are_percentages_and_mixes_keep_proportions() -> None:
    assert parse_shares("0, 10,50") == (0.0, 0.1, 0.5)
    for bad in ("x", "", "150", ",".join(["1"] * 21)):
        with pytest.raises(WorkloadError):
            parse_shares(bad)
    assert sweep_mix({"standard": 3, "spark": 1}, 0.2) == pytest.approx(
        {"standard": 0.6, "spark": 0.2, "fast": 0.2})
