"""``fastmode serve --time-scale 0.01``: a long spark answer, every reported time modeled."""

from __future__ import annotations

import httpx
import orjson
import pytest
from conftest import launch, stop_server

from fastmode.backends.engine import build
from fastmode.backends.pricing import operating_step_seconds
from fastmode.gateway.config import load_config

BODY = {"model": "frontier-spark", "max_tokens": 1000, "ignore_eos": True,  # exactly 1,000
        "messages": [{"role": "user", "content": "Write a very long essay about rivers."}]}


def test_a_scaled_spark_answer_reports_modeled_seconds() -> None:
    proc, url = launch("--time-scale", "0.01")
    try:
        r = httpx.post(url + "/v1/chat/completions", json=BODY,
                       headers={"x-fastmode-trace": "1"}, timeout=30)
        traces = httpx.get(url + "/v1/fastmode/traces", timeout=10).text
    finally:
        stop_server(proc)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == 1000
    info = body["time_info"]
    # the model's figures, not the host's: no lag written into them at a scaled clock
    assert info["host_lag_time"] == 0.0
    d = build(load_config().sim()).tiers["spark"].deployment
    per_token = operating_step_seconds(d.placement, d.background)
    assert info["completion_time"] == pytest.approx(999 * per_token, rel=0.05)
    # the trace is on the same modeled clock: its write came after the modeled last token
    trace = orjson.loads(traces.strip().splitlines()[-1])
    assert trace["request_id"] == r.headers["x-request-id"]
    assert trace["last_byte"] - trace["arrival"] >= info["total_time"]
