"""``fastmode bench`` against a live fastmode on loopback: the report agrees with /metrics."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import httpx

from fastmode.cli import main

_SAMPLE = re.compile(r"^(\w+)(?:\{([^}]*)\})?\s+(\S+)$")


def scrape(url: str) -> dict[str, dict[frozenset, float]]:
    """Prometheus text -> {metric name: {frozenset of (label, value): sample}}."""
    out: dict[str, dict[frozenset, float]] = defaultdict(dict)
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        m = _SAMPLE.match(line)
        if not m or line.startswith("#"):
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[m.group(1)][labels] = float(m.group(3))
    return out


def value(metrics: dict, name: str, **labels: str) -> float:
    return metrics.get(name, {}).get(frozenset(labels.items()), 0.0)


def test_json_report_counts_match_server_metrics(live_server: str, tmp_path: Path, capsys):
    out = tmp_path / "report.json"
    before = scrape(live_server)
    code = main([
        "bench", "--url", live_server, "--mix", "spark=1", "--concurrency", "6",
        "--requests", "36", "--prompt-tokens", "60", "--output-tokens", "24",
        "--tools-share", "0.25", "--slo-ttft", "1", "--json", str(out), "--no-progress",
    ])
    after = scrape(live_server)
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    totals = doc["totals"]
    assert totals["requests"] == 36 and totals["errors"] == 0
    assert totals["ok_by_served_tier"] == {"spark": 36}

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("fastmode_requests_total", tier="spark", status="200") == 36
    assert delta("fastmode_output_tokens_total", tier="spark") == (
        totals["output_tokens_by_served_tier"]["spark"])
    spark = doc["tiers"]["spark"]
    assert spark["ok"] == 36 and spark["output_tokens"] == totals["output_tokens_by_served_tier"]["spark"]
    assert abs(delta("fastmode_cost_usd_total", tier="spark") - spark["cost_usd"]["total"]) < 1e-9
    tools = spark["tool_calls"]
    # a turn may call several tools at once (parallel tool calls)
    assert tools["requests_with_tools"] >= 1 and tools["calls"] >= tools["requests_with_tools"]
    assert tools["validity_rate"] is not None
    assert delta("fastmode_prompt_tokens_total", tier="spark") >= 36 * 60
    assert spark["ttft_s"]["n"] == 36 and spark["ttft_s"]["p50"] > 0
    assert spark["goodput"]["share"] == 1.0
    assert doc["params"]["concurrency"] == 6 and doc["params"]["workload"]["mix"] == {"spark": 1}
    assert "Latency per tier" in capsys.readouterr().out


def test_exact_lengths_mixed_tiers_plots_and_compare_sim(live_server: str, tmp_path: Path,
                                                         capsys):
    out, plots = tmp_path / "r.json", tmp_path / "plots"
    code = main([
        "bench", "--url", live_server, "--mix", "standard=0.3,fast=0.3,spark=0.4",
        "--rate", "20", "--arrivals", "constant", "--requests", "24", "--prompt-tokens", "40",
        "--output-tokens", "12", "--json", str(out), "--plots", str(plots), "--compare-sim",
        "--no-progress",
    ])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["totals"]["ok"] == 24
    for tier, g in doc["tiers"].items():
        assert g["prompt_tokens"] == 40 * g["ok"], tier  # prompts of exactly 40 tokens
        assert g["output_tokens"] == 12 * g["ok"], tier  # ignore_eos: exactly 12 tokens
        assert g["served_tiers"] == {tier: g["ok"]}
    assert doc["tiers"]["spark"]["user_tokens_per_s"]["p50"] > doc["tiers"]["standard"][
        "user_tokens_per_s"]["p50"]
    rows = doc["compare_sim"]["rows"]
    assert {r["tier"] for r in rows} == {"standard", "fast", "spark"}
    itl = next(r for r in rows if r["tier"] == "standard" and r["figure"] == "ITL mean (s)")
    assert itl["predicted"] > 0 and abs(itl["relative_difference"]) < 0.5
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["itl_cdf.png", "latency_over_time.png", "ttft_cdf.png",
                     "user_tokens_per_s.png"]
    assert all((plots / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)
    assert "Measured vs simulated" in capsys.readouterr().out


def test_fast_share_scenario(live_server: str, tmp_path: Path, capsys):
    out = tmp_path / "sweep.json"
    code = main([
        "bench", "--url", live_server, "--scenario", "fast-share", "--shares", "0,50",
        "--rate", "16", "--arrivals", "constant", "--duration", "0.75",
        "--prompt-tokens", "30", "--output-tokens", "8", "--json", str(out),
        "--plots", str(tmp_path), "--no-progress",
    ])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert [r["fast_share"] for r in rows] == [0.0, 0.5]
    assert rows[0]["fast_requests"] is None and rows[1]["fast_requests"] > 0
    assert all(r["standard_ttft_p50_s"] > 0 and r["errors"] == 0 for r in rows)
    assert rows[1]["cost_usd"] > rows[0]["cost_usd"]  # fast is dearer at the same rate
    assert (tmp_path / "fast_share.png").exists()
    assert "What does fast mode do" in capsys.readouterr().out


def test_errors_are_reported_not_raised(live_server: str, tmp_path: Path, capsys):
    out = tmp_path / "r.json"
    code = main([
        "bench", "--url", live_server, "--tier", "ghost=no-such-model@/v1", "--mix", "ghost=1",
        "--concurrency", "2", "--requests", "4", "--json", str(out), "--no-progress",
    ])
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["totals"]["errors_by_kind"] == {"http_404": 4}
    assert "Errors by kind" in capsys.readouterr().out


def test_two_worker_processes_still_match_server_metrics(live_server: str, tmp_path: Path,
                                                         capsys):
    out = tmp_path / "r.json"
    before = scrape(live_server)
    code = main([
        "bench", "--url", live_server, "--mix", "spark=1", "--rate", "40", "--requests", "20",
        "--prompt-tokens", "30", "--output-tokens", "10", "--workers", "2", "--json", str(out),
        "--no-progress",
    ])
    after = scrape(live_server)
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["generator"]["workers"] == 2
    assert doc["totals"]["ok_by_served_tier"] == {"spark": 20}
    assert doc["totals"]["output_tokens_by_served_tier"] == {"spark": 200}
    got = (value(after, "fastmode_requests_total", tier="spark", status="200")
           - value(before, "fastmode_requests_total", tier="spark", status="200"))
    assert got == 20
    assert 0.2 < doc["window"]["span_s"] < 5  # one timeline: ~20 requests at 40/s


def test_websocket_transport_counts_match_server_metrics(live_server: str, tmp_path: Path,
                                                         capsys):
    out = tmp_path / "r.json"
    before = scrape(live_server)
    code = main([
        "bench", "--url", live_server, "--transport", "ws", "--mix", "spark=0.5,fast=0.5",
        "--concurrency", "3", "--requests", "12", "--prompt-tokens", "30",
        "--output-tokens", "10", "--json", str(out), "--no-progress",
    ])
    after = scrape(live_server)
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["params"]["transport"] == "ws" and doc["totals"]["errors"] == 0
    for tier, n in doc["totals"]["ok_by_served_tier"].items():
        got = (value(after, "fastmode_requests_total", tier=tier, status="200")
               - value(before, "fastmode_requests_total", tier=tier, status="200"))
        assert got == n, tier
        assert doc["totals"]["output_tokens_by_served_tier"][tier] == 10 * n
        assert doc["tiers"][tier]["ttft_s"]["n"] == n
