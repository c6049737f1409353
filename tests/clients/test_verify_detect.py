"""``fastmode verify`` refuses what it cannot read and separates the client's time from a
formula: results recognised by their files, exit 2 when nothing is compared, and TTFT/E2E
judged with each request's measured client time (built traces with chosen timestamps, and the
recorded runs in ``fixtures/verify``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fastmode.cli import main
from fastmode.clients.verify.compare import NothingCompared, compare
from fastmode.clients.verify.records import ToolRequest, ToolRun
from fastmode.clients.verify.tools import Unreadable, read
from fastmode.clients.verify.truth import Truth, load

FIX = Path(__file__).parent / "fixtures" / "verify"


def test_an_empty_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    traces = str(FIX / "aiperf" / "traces.jsonl")
    assert main(["verify", str(empty), "--traces", traces]) == 2
    err = capsys.readouterr().err
    assert "none of the files verify reads" in err and "it has nothing" in err


def test_a_foreign_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder of some other tool's files (a config and a report verify does not know)."""
    (tmp_path / "config.yml").write_text("load: {type: constant}\n")
    (tmp_path / "stage_0_lifecycle_metrics.json").write_text('{"load_summary": {}}')
    traces = str(FIX / "aiperf" / "traces.jsonl")
    assert main(["verify", str(tmp_path), "--traces", traces]) == 2
    assert "config.yml, stage_0_lifecycle_metrics.json" in capsys.readouterr().err


def test_a_file_of_the_wrong_schema_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "profile_export_aiperf.json"
    bad.write_text('{"benchmarks": "not a list"}')
    with pytest.raises(Unreadable, match="not aiperf's summary"):
        read(str(tmp_path))
    lines = tmp_path / "x.jsonl"
    lines.write_text('{"a": 1}\n')
    with pytest.raises(Unreadable, match="not aiperf's records"):
        read(str(lines))


def test_a_tool_named_against_its_files_is_refused() -> None:
    with pytest.raises(Unreadable, match="--tool guidellm, but the files are aiperf's"):
        read(str(FIX / "aiperf"), tool="guidellm")


def test_each_recorded_output_is_recognised_by_its_files(tmp_path: Path) -> None:
    assert read(str(FIX / "aiperf")).tool == "aiperf"
    assert read(str(FIX / "aiperf" / "profile_export.jsonl")).tool == "aiperf"
    assert read(str(FIX / "guidellm")).tool == "guidellm"
    folder = read(str(FIX / "inference-perf"))
    assert folder.tool == "inference-perf" and len(folder.requests) == 8
    renamed = tmp_path / "report.json"  # guidellm's report under any name: by its schema
    shutil.copy(FIX / "guidellm" / "benchmarks.json", renamed)
    assert read(str(renamed)).tool == "guidellm"


def test_an_inference_perf_report_with_no_success_is_refused(tmp_path: Path) -> None:
    doc = json.loads((FIX / "inference-perf" / "summary_lifecycle_metrics.json").read_text())
    doc["successes"] = {"count": 0}
    (tmp_path / "summary_lifecycle_metrics.json").write_text(json.dumps(doc))
    with pytest.raises(Unreadable, match="no successful request"):
        read(str(tmp_path))


def test_ids_that_join_nothing_compare_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """aiperf's results against the traces of guidellm's run: exit 2, not a verdict."""
    traces = str(FIX / "guidellm" / "traces.jsonl")
    assert main(["verify", str(FIX / "aiperf"), "--traces", traces]) == 2
    assert "none of the tool's 8 requests is in the 8 traces" in capsys.readouterr().err


def _truth(k: int, arrival: float) -> Truth:
    """A request: first byte 5 ms after arrival, first token at 20 ms, 10 tokens 10 ms apart,
    the last byte 1 ms after the last token."""
    first = arrival + 0.020
    gaps = [(0.010, 1)] * 9
    return Truth(f"req-{k}", f"r{k}", None, "responses", "fast", arrival, arrival + 0.005,
                 first, first + 0.090, first + 0.091, 10, 10, gaps)


def _run(truths: list[Truth], before: float, read_delay: float, *, first_byte: bool = False
         ) -> ToolRun:
    """A tool whose clock starts ``before`` the arrival and that reads each event
    ``read_delay`` after its send; ``first_byte``: its TTFT ends at the first byte."""
    run = ToolRun("built", "built")
    for t in truths:
        start = t.arrival - before
        first = (t.first_byte if first_byte else t.first_token) + read_delay  # type: ignore[operator]
        run.requests.append(ToolRequest(t.client_request_id, start, first - start,
                                        t.last_byte + read_delay - start))
    ttfts = sorted(r.ttft for r in run.requests)  # type: ignore[type-var]
    e2es = [r.e2e for r in run.requests]
    run.metrics["ttft"] = {"p50": ttfts[len(ttfts) // 2], "mean": sum(ttfts) / len(ttfts)}  # type: ignore[arg-type]
    run.metrics["e2e"] = {"mean": sum(e2es) / len(e2es)}  # type: ignore[arg-type]
    return run


TRUTHS = [_truth(k, 100.0 + k + 0.003 * k) for k in range(5)]


def test_the_clients_measured_time_is_not_a_formula_error() -> None:
    """3 ms before arrival and 1 ms reading: 4 ms over a 20 ms TTFT (20%), a right tool."""
    run = _run(TRUTHS, 0.003, 0.001)
    v = compare(run, TRUTHS)
    assert v.ok
    rows = {(r.metric, r.stat): r for r in v.rows}
    ttft = rows[("ttft", "mean")]
    assert ttft.client == pytest.approx(0.004) and ttft.error == pytest.approx(0.004)
    assert ttft.why.startswith("the client's own +4.00 ms (3.00 ms before the server's arrival")
    assert not compare(run, TRUTHS, strict=True).ok


def test_a_ttft_at_the_first_byte_still_fails() -> None:
    """The same client, but its TTFT ends at the first byte: its reading is before the server
    sent the first token, so no client time excuses it, and the variant is named."""
    v = compare(_run(TRUTHS, 0.003, 0.0, first_byte=True), TRUTHS)
    assert not v.ok
    row = next(r for r in v.rows if (r.metric, r.stat) == ("ttft", "mean"))
    assert not row.ok and row.client == pytest.approx(0.0)
    assert row.why == ("matches the server's first byte (an event without tokens) (after its "
                       "clock's 3.00 ms before the arrival)")
    assert any(f.startswith("TTFT: 5 of 5 requests end before the server sent the first token")
               and "it ends at the first byte" in f for f in v.findings)


def test_a_slow_request_is_named() -> None:
    run = _run(TRUTHS, 0.001, 0.0005)
    slow = run.requests[2]
    slow.ttft = slow.ttft + 0.025  # type: ignore[operator]
    v = compare(run, TRUTHS)
    assert any("far above the others' on 1 requests: r2 (+26.50 ms" in f for f in v.findings)


def test_a_verdict_needs_a_figure_to_compare() -> None:
    run = ToolRun("built", "built", metrics={"kv_cache": {"mean": 1.0}})
    with pytest.raises(NothingCompared, match="has a server counterpart"):
        compare(run, TRUTHS)


def test_the_recorded_runs_ttft_is_the_clients_time() -> None:
    """aiperf (run with its own tokenizer: known wrong) and guidellm at concurrency 1: their
    TTFT over the server's is the client's measured time; aiperf still fails on its tokens."""
    for tool in ("aiperf", "guidellm"):
        v = compare(read(str(FIX / tool)), load(str(FIX / tool / "traces.jsonl")))
        ttft = [r for r in v.rows if r.metric == "ttft"]
        assert ttft and all(r.ok for r in ttft), ttft
        assert any(r.error > 0.001 and r.why.startswith("the client's own") for r in ttft)
    v = compare(read(str(FIX / "aiperf")), load(str(FIX / "aiperf" / "traces.jsonl")))
    off = {r.metric for r in v.rows if not r.ok}
    assert off == {"itl", "output_tps", "output_tokens"}


def test_aiperf_with_the_exported_tokenizer_passes() -> None:
    """A real aiperf 0.13 run (concurrency 1) with ``--tokenizer`` the folder ``fastmode
    tokenizer`` writes: its token counts are the server's, every figure is within tolerance
    (TTFT with the client's measured time), and the command exits 0."""
    base = FIX / "aiperf-tokenizer"
    v = compare(read(str(base)), load(str(base / "traces.jsonl")))
    assert v.joined == 8 and v.ok
    rows = {(r.metric, r.stat): r for r in v.rows}
    assert rows[("output_tokens", "total")].error == 0
    assert main(["verify", str(base), "--traces", str(base / "traces.jsonl")]) == 0


def test_guidellm_at_16_streams_passes_on_its_own_tpot() -> None:
    """A real guidellm 0.8.1 run, 16 streams: its TPOT is (last token − its request start) / N,
    each request weighted by its N tokens (guidellm's ``time_per_output_token_ms``); the
    server's figure computed so, every row is right and the command exits 0."""
    base = FIX / "guidellm-c16"
    v = compare(read(str(base)), load(str(base / "traces.jsonl")))
    assert v.joined == 32
    assert v.ok, [(r.metric, r.stat, r.why) for r in v.rows if not r.ok]
    assert {r.metric for r in v.rows} >= {"tpot", "itl", "ttft", "e2e"}
    assert main(["verify", str(base), "--traces", str(base / "traces.jsonl")]) == 0


def test_guidellm_with_a_tpot_that_leaves_out_the_first_token_fails(tmp_path: Path) -> None:
    """The same run with its TPOT rewritten as the gaps' (last − first token over N − 1, which
    is not guidellm's definition): off, and named for it."""
    base = FIX / "guidellm-c16"
    doc = json.loads((base / "benchmarks.json").read_text())
    for bench in doc["benchmarks"]:
        bench["metrics"]["time_per_output_token_ms"] = bench["metrics"]["inter_token_latency_ms"]
    (tmp_path / "benchmarks.json").write_text(json.dumps(doc))
    v = compare(read(str(tmp_path)), load(str(base / "traces.jsonl")))
    off = [r for r in v.rows if not r.ok]
    assert off and {r.metric for r in off} == {"tpot"}
    assert all("TTFT left out" in r.why for r in off), [r.why for r in off]
    assert main(["verify", str(tmp_path), "--traces", str(base / "traces.jsonl")]) == 1



def test_inference_perf_at_16_streams_with_the_exported_tokenizer_passes() -> None:
    """A real inference-perf 0.7 run (Completions, 16 streams, ``tokenizer`` the folder
    ``fastmode tokenizer`` writes): its monotonic clock put on the server's, TTFT and E2E are
    the server's plus the client's measured time, its ITL tail is its own reading of each
    token, and the command exits 0."""
    base = FIX / "inference-perf-c16"
    v = compare(read(str(base)), load(str(base / "traces.jsonl")))
    assert v.joined == 32
    assert v.ok, [(r.metric, r.stat, r.why) for r in v.rows if not r.ok]
    assert any("clock is monotonic: put on the server's" in f for f in v.findings)
    rows = {(r.metric, r.stat): r for r in v.rows}
    assert rows[("ttft", "p50")].client is not None and rows[("ttft", "p50")].client > 0
    assert main(["verify", str(base), "--traces", str(base / "traces.jsonl")]) == 0


def test_inference_perf_with_per_request_means_as_its_itl_fails(tmp_path: Path) -> None:
    """The same run with its ITL distribution replaced by its TPOT's (one mean per request,
    which hides the tokens' tail): off at the tail, named for it."""
    base = FIX / "inference-perf-c16"
    doc = json.loads((base / "summary_lifecycle_metrics.json").read_text())
    lat = doc["successes"]["latency"]
    lat["inter_token_latency"] = lat["time_per_output_token"]
    (tmp_path / "summary_lifecycle_metrics.json").write_text(json.dumps(doc))
    shutil.copy(base / "per_request_lifecycle_metrics.json", tmp_path)
    v = compare(read(str(tmp_path)), load(str(base / "traces.jsonl")))
    off = {(r.metric, r.stat): r for r in v.rows if not r.ok}
    assert ("itl", "p99") in off, [(r.metric, r.stat, r.why) for r in v.rows]
    assert off[("itl", "p99")].why == "matches the server's per-request means (TPOT)"
    assert main(["verify", str(tmp_path), "--traces", str(base / "traces.jsonl")]) == 1


@pytest.mark.parametrize(("folder", "protocol"), [("guidellm-responses", "responses"),
                                                  ("inference-perf-messages", "messages")])
def test_responses_and_messages_runs_join_and_pass(folder: str, protocol: str) -> None:
    """Real runs on the other protocols the tools speak: guidellm 0.8.1 with
    ``request_format=/v1/responses`` and inference-perf 0.7 with ``api.type:
    anthropic_messages`` (its mock data: the only offline source it has for Messages), 8
    requests at 4 streams. Each joins by the body's id (``resp_…``, ``msg_…``) among traces of
    both runs, and passes."""
    base = FIX / folder
    truths = load(str(base / "traces.jsonl"))
    run = read(str(base))
    v = compare(run, truths)
    assert v.joined == 8 and v.requests_server > 8
    by_id = {t.response_id: t for t in truths}
    assert {by_id[r.response_id].protocol for r in run.requests} == {protocol}
    assert v.ok, [(r.metric, r.stat, r.why) for r in v.rows if not r.ok]
    assert main(["verify", str(base), "--traces", str(base / "traces.jsonl")]) == 0
