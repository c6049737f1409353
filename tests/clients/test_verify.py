"""``fastmode verify``: a tool's results against the server's ground truth.

Offline and deterministic: the traces and results are either recorded outputs kept in
``fixtures/verify`` (a real aiperf 0.13 run and a real ``fastmode bench --json`` run against
``fastmode serve --trace``) or built here with chosen timestamps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fastmode.cli import main
from fastmode.clients.verify.compare import compare, percentile, server_metrics
from fastmode.clients.verify.tools import read
from fastmode.clients.verify.truth import from_record, load

FIX = Path(__file__).parent / "fixtures" / "verify"


def _record(arrival: float, events: list[tuple[float | None, float, int]],
            client_id: str | None = None) -> dict[str, Any]:
    token_events = [e for e in events if e[2]]
    return {"seq": 1, "request_id": "req-1", "client_request_id": client_id,
            "response_id": "chatcmpl-1", "protocol": "responses", "tier": "fast",
            "arrival": arrival, "first_byte": events[0][1],
            "first_token": token_events[0][1], "last_token": token_events[-1][1],
            "last_byte": events[-1][1], "output_tokens": sum(e[2] for e in events),
            "token_events": len(token_events),
            "events": [{"due": d, "sent": s, "tokens": n} for d, s, n in events]}


# an opening event with no tokens at 10 ms, then events of 4, 4 and 2 tokens, then the closing
EVENTS = [(None, 100.010, 0), (100.019, 100.020, 4), (100.059, 100.060, 4),
          (100.099, 100.100, 2), (None, 100.101, 0)]


def test_the_truth_of_one_request() -> None:
    t = from_record(_record(100.0, EVENTS))
    assert t is not None
    assert t.ttft == pytest.approx(0.020) and t.ttfb == pytest.approx(0.010)
    assert t.e2e == pytest.approx(0.101)
    assert t.tpot == pytest.approx(0.080 / 9)
    assert t.itl() == pytest.approx([0.010] * 4 + [0.020] * 2)  # per token
    assert t.itl_event() == pytest.approx([0.040, 0.040])  # per event


def _traces(tmp: Path, n: int = 5) -> Path:
    path = tmp / "traces.jsonl"
    lines = []
    for k in range(n):
        shift = float(k)
        events = [(None if d is None else d + shift, s + shift, tok) for d, s, tok in EVENTS]
        lines.append(json.dumps({**_record(100.0 + shift, events, f"r{k}"), "seq": k + 1}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _vllm(tmp: Path, **ms: float) -> Path:
    """A ``vllm bench serve --save-result`` file with these mean/median/p90/p99 figures (ms)."""
    doc: dict[str, Any] = {"completed": 5, "total_output_tokens": 50}
    for name, value in ms.items():
        for stat in ("mean", "median", "p90", "p99"):
            doc[f"{stat}_{name}_ms"] = value
    path = tmp / "vllm.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_right_tool_is_within_tolerance(tmp_path: Path) -> None:
    truths = load(str(_traces(tmp_path)))
    run = read(str(_vllm(tmp_path, ttft=20.0, tpot=80 / 9, e2el=101.0)))
    v = compare(run, truths)
    assert v.ok and {r.metric for r in v.rows} == {"ttft", "tpot", "e2e", "output_tokens"}


def test_the_reason_a_tool_is_off(tmp_path: Path) -> None:
    """A tool that takes the opening event for the first token, and one that divides the
    inter-token time by events instead of tokens: both are named."""
    truths = load(str(_traces(tmp_path)))
    v = compare(read(str(_vllm(tmp_path, ttft=10.0, itl=40.0))), truths)
    assert not v.ok
    why = {r.metric: r.why for r in v.rows if r.stat == "mean"}
    assert why["ttft"] == "matches the server's first byte (an event without tokens)"
    assert why["itl"] == "matches the server's per event, not per token"
    server = server_metrics(truths)
    assert server["itl"]["right"]["mean"] == pytest.approx((4 * 0.010 + 2 * 0.020) / 6)


def test_percentiles_interpolate_linearly() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0


def test_a_recorded_aiperf_run() -> None:
    """aiperf 0.13 at concurrency 1: 8 requests joined by the X-Request-ID it sends; its E2E
    agrees with the server's; it counts output tokens with its tokenizer (fewer than the server
    sent), so its ITL is the server's per-request ITL with *its* token counts, and its TTFT
    starts before the request reaches the server."""
    truths = load(str(FIX / "aiperf" / "traces.jsonl"))
    run = read(str(FIX / "aiperf"))
    assert run.tool == "aiperf" and len(run.requests) == 8
    v = compare(run, truths)
    assert v.joined == 8 and not v.ok
    rows = {(r.metric, r.stat): r for r in v.rows}
    assert all(rows[("e2e", s)].ok for s in ("p50", "p90", "p99", "mean"))
    assert rows[("request_tps", "value")].ok
    assert not rows[("output_tokens", "total")].ok
    assert rows[("output_tokens", "total")].tool < rows[("output_tokens", "total")].server
    assert rows[("itl", "mean")].why == "matches the server's per request, with the tool's token counts"
    assert rows[("ttft", "mean")].error > 0
    assert any(f.startswith("output tokens: the tool counted 426 where the server sent 480")
               for f in v.findings)


def test_a_recorded_fastmode_bench_run() -> None:
    """Our own bench (4 streams on the standard tier): tokens, throughput and TPOT agree."""
    v = compare(read(str(FIX / "fastmode-bench.json")),
                load(str(FIX / "fastmode-bench.traces.jsonl")))
    rows = {(r.metric, r.stat): r for r in v.rows}
    for key in (("output_tokens", "total"), ("request_tps", "value"), ("output_tps", "value"),
                ("tpot", "p50"), ("tpot", "mean"), ("itl", "mean")):
        assert rows[key].ok, rows[key]


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v.json"
    traces = str(FIX / "aiperf" / "traces.jsonl")
    assert main(["verify", str(FIX / "aiperf"), "--traces", traces, "--json", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert doc["tool"] == "aiperf" and doc["ok"] is False and doc["joined"] == 8
    assert "OFF" in capsys.readouterr().out
    # a wide enough tolerance passes: the exit status is the CI's signal
    assert main(["verify", str(FIX / "aiperf"), "--traces", traces, "--rel", "1000",
                 "--abs-ms", "1000"]) == 0


def test_an_unknown_file_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    assert main(["verify", str(bad), "--traces", str(_traces(tmp_path))]) == 2


def test_a_recorded_guidellm_run() -> None:
    """guidellm 0.8.1 at concurrency 1: joined by the response id it keeps; its percentiles
    are nearest-rank and its ITL distribution repeats each request's mean once per token (its
    definitions), so the server's are computed those ways; throughput and TPOT agree."""
    truths = load(str(FIX / "guidellm" / "traces.jsonl"))
    run = read(str(FIX / "guidellm" / "benchmarks.json"))
    assert run.tool == "guidellm" and run.percentiles == "nearest"
    v = compare(run, truths)
    assert v.joined == 8
    rows = {(r.metric, r.stat): r for r in v.rows}
    for key in (("output_tps", "value"), ("request_tps", "value"), ("tpot", "p90"),
                ("e2e", "p90"), ("itl", "mean")):
        assert rows[key].ok, rows[key]
    assert all(r.ok for r in v.rows if r.metric == "itl")
    assert any(f.startswith("ITL: guidellm's distribution is each request's mean once per "
                            "token") for f in v.findings)


def test_a_recorded_inference_perf_run() -> None:
    """inference-perf 0.7 (Completions, concurrency 1): joined by the id in the response it
    kept; it counts output tokens with its tokenizer, so its TPOT and tok/s follow its count."""
    base = FIX / "inference-perf"
    run = read(str(base / "summary_lifecycle_metrics.json"))
    assert run.tool == "inference-perf"
    v = compare(run, load(str(base / "traces.jsonl")))
    assert v.joined == 8
    rows = {(r.metric, r.stat): r for r in v.rows}
    assert rows[("request_tps", "value")].ok
    assert rows[("tpot", "mean")].why == ("matches the server's per request, with the tool's "
                                          "token counts")
    assert rows[("output_tps", "value")].why == ("matches the server's output tokens as the "
                                                 "tool counted them")


def test_a_tpot_with_the_first_token_wait_is_named(tmp_path: Path) -> None:
    """guidellm's TPOT: (last token − start) / N; here (100 ms) / 10 tokens."""
    truths = load(str(_traces(tmp_path)))
    v = compare(read(str(_vllm(tmp_path, tpot=10.0))), truths)
    [row] = [r for r in v.rows if (r.metric, r.stat) == ("tpot", "mean")]
    assert not row.ok
    assert row.why == "matches the server's (last token - arrival) / N, TTFT included"


def test_per_request_means_as_token_percentiles_are_named(tmp_path: Path) -> None:
    """vLLM's ITL is per token: a file whose ITL p99 is the per-request mean hides the
    tokens' tail (20 ms gaps) and is off, with the reason."""
    truths = load(str(_traces(tmp_path)))
    v = compare(read(str(_vllm(tmp_path, itl=80 / 9))), truths)
    [row] = [r for r in v.rows if (r.metric, r.stat) == ("itl", "p99")]
    assert not row.ok and row.server == pytest.approx(0.020)
    assert row.why == "matches the server's per-request means (TPOT)"
