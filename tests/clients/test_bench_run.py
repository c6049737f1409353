"""``fastmode bench`` without a server: the plan from flags, its JSON parameters, and bad flags
reported as one line with exit status 2 before anything is sent."""

from __future__ import annotations

import argparse

import pytest

from fastmode.cli import main
from fastmode.cli.bench import build_plan, register
from fastmode.clients.bench_run import BenchPlan, flag_workload
from fastmode.clients.load_config import LoadConfig, LoadError, parse_headers
from fastmode.clients.report import report_renderables
from fastmode.clients.workload import DEFAULT_ROUTES, LengthDist, RequestSpec, WorkloadError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


def test_flags_become_a_plan_with_the_documented_defaults():
    plan = build_plan(parse("--mix", "standard=3,fast=1", "--rate", "5", "--arrivals",
                            "constant", "--header", "X-Team: infra", "--api-key", "k"))
    cfg = plan.load
    assert cfg.requests == 100 and cfg.duration is None and cfg.rate == 5
    assert cfg.headers == {"x-team": "infra", "authorization": "Bearer k"}
    assert plan.workload is not None and plan.workload.mix == {"standard": 0.75, "fast": 0.25}
    params = plan.params()
    assert params["workload"] == {
        "mix": {"standard": 0.75, "fast": 0.25}, "prompt_tokens": {"kind": "fixed", "mean": 500},
        "output_tokens": {"kind": "fixed", "mean": 200}, "tools_share": 0.0}
    assert params["routes"]["fast"] == {"path": "/fast/v1", "model": "frontier"}
    assert list(params)[-5:] == ["slo_ttft_s", "slo_tpot_s", "price_table", "workers",
                                 "workload"]
    assert plan.title() == "5 req/s constant; standard 75%, fast 25%; prompt 500, output 200 tok"
    assert plan.title(with_mix=False) == "5 req/s constant; prompt 500, output 200 tok"


def test_a_trace_plan_describes_the_trace():
    cfg = LoadConfig("http://h:1", dict(DEFAULT_ROUTES), concurrency=2)
    trace = [RequestSpec("standard", [{"role": "user", "content": "x"}], 3)]
    plan = BenchPlan(cfg, trace=trace, trace_path="t.jsonl")
    assert plan.params()["workload"] == {"trace": "t.jsonl", "requests_in_trace": 1}
    assert plan.title() == "2 users; trace t.jsonl"
    with pytest.raises(ValueError, match="exactly one"):
        BenchPlan(cfg)
    with pytest.raises(LoadError, match="--compare-sim"):
        BenchPlan(cfg, trace=trace, compare_sim=True)


def test_library_errors_name_the_flag():
    with pytest.raises(WorkloadError, match="--mix: tier 'turbo' has no route"):
        flag_workload("turbo=1", dict(DEFAULT_ROUTES), LengthDist("fixed", 10),
                      LengthDist("fixed", 10), 0.0, 1)
    with pytest.raises(LoadError, match="--header: expected NAME:VALUE"):
        parse_headers(["no-colon"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--concurrency", "1", "--workers", "0"], "--workers: must be >= 1, got 0"),
        (["--concurrency", "1", "--header", "nocolon"], "--header: expected NAME:VALUE"),
        (["--concurrency", "1", "--price-table", "standard=1"], "--price-table: expected TIER=INPUT:OUTPUT"),
        (["--concurrency", "1", "--mix", "turbo=1"], "--mix: tier 'turbo' has no route"),
        (["--rate", "0"], "--rate: must be > 0"),
        (["--concurrency", "1", "--url", "localhost:8000"], "--url: expected http(s)://host[:port]"),
        (["--trace", "t.jsonl", "--compare-sim"], "--trace: cannot be combined"),
        (["--scenario", "fast-share", "--rate", "1", "--shares", "x"], "--shares: expected"),
        (["--scenario", "fast-share", "--rate", "1", "--shares", "150"],
         "--shares: each share must be in"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(capsys, argv, message):
    assert main(["bench", "--url", "http://127.0.0.1:9", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastmode bench: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_chat_refuses_a_zero_token_cap(capsys):
    assert main(["chat", "--max-tokens", "0", "hi"]) == 2
    assert capsys.readouterr().err == "fastmode chat: error: --max-tokens: must be at least 1\n"


def test_report_parts_come_in_the_documented_order():
    group = {
        "ok": 1, "requests": 1, "ttft_s": {"p50": 0.01, "p90": 0.01, "p99": 0.01},
        "itl_s": {"p50": 0.001, "p99": 0.002}, "e2e_s": {"p50": 0.1, "p99": 0.1},
        "tpot_s": {"p50": 0.001}, "user_tokens_per_s": {"p50": 900.0, "min": 900.0},
        "output_tokens_per_s": 90.0, "requests_per_s": 1.0,
        "goodput": {"share": 1.0, "slo_ttft_s": None, "slo_tpot_s": None},
        "cost_usd": {"total": 0.001, "per_request": 0.001},
        "tool_calls": {"validity_rate": None, "calls": 0},
    }
    doc = {
        "window": {"measured_requests": 1, "span_s": 1.0}, "tiers": {"spark": group},
        "overall": group,
        "totals": {"requests": 2, "ok": 1, "errors": 1, "downgraded": 0,
                   "errors_by_kind": {"timeout": 1}, "error_examples": {"timeout": "slow"}},
        "generator": {"workers": 1, "cpu_utilisation": 0.9, "schedule_lag_p99_s": None,
                      "interrupted": True},
    }
    parts = report_renderables(doc)
    titles = [str(getattr(p, "title", "")) for p in parts[:3]]
    assert titles[0].startswith("Latency per tier") and titles[1].startswith("Throughput")
    assert titles[2] == "Errors by kind (whole run)"
    assert parts[3] == ("2 requests sent (1 ok, 1 errors, 0 downgraded); generator CPU 90.0% "
                        "of one core")
    assert "warning" in str(parts[4]) and "interrupted" in str(parts[5])
