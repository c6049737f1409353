"""Schema-driven fuzzing of every route in /openapi.json (schemathesis): zero 5xx, and every
error in the route's own format — Anthropic's body on /v1/messages, OpenAI's elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from conftest import quick_config_text
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from fastmode.gateway.config import default_config_text

# replies stay short so that a fuzzed request that is valid costs a fraction of a second (and
# the hardware is faster: what is checked is the status and the error format, not the speed)
CONFIG = quick_config_text(
    default_config_text().replace("default_max_tokens = 4096", "default_max_tokens = 8"))
CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
EXAMPLES = 4  # per operation and mode: about 200 requests in a few seconds


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[schemathesis.schemas.BaseSchema]:
    from conftest import start_server, stop_server

    assert "default_max_tokens = 8" in CONFIG
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    proc, url = start_server(config_text=CONFIG, tmp=tmp)
    try:
        schema = schemathesis.openapi.from_url(url + "/openapi.json")
        # an endless event stream (GET /dashboard/feed, an event every 0.5 s) is read up to its
        # first event, not schemathesis' default of 20 (10 s): call() checks only its status
        schema.config.max_stream_events = 1
        yield schema
    finally:
        stop_server(proc)


def check_format(path: str, status: int, body: object) -> None:
    assert status < 500, (path, status, body)
    if status < 400 or status == 499:
        return
    assert isinstance(body, dict), (path, status, body)
    if path.split("/v1/", 1)[-1].startswith("messages"):  # Anthropic's routes, sub-paths too
        assert body.get("type") == "error", body
        assert set(body["error"]) >= {"type", "message"}, body
    else:
        err = body.get("error")
        assert isinstance(err, dict) and set(err) >= {"message", "type", "param", "code"}, body


def call(case) -> None:
    if isinstance(case.body, dict):
        # bounded replies: a fuzzer's max_tokens of 10**9 is a 400 anyway, and a request
        # without a cap may reason up to the context window (legitimately minutes long)
        for cap in CAPS:
            value = case.body.get(cap)
            if isinstance(value, int) and not isinstance(value, bool) and value > 16:
                case.body[cap] = 16
        if not any(cap in case.body for cap in CAPS):
            case.body["max_output_tokens" if "input" in case.body else "max_tokens"] = 16
    try:
        response = case.call(timeout=30)
    except requests.Timeout:
        raise AssertionError(f"no answer in 30 s: {case.method} {case.formatted_path} "
                             f"{str(case.body)[:500]}") from None
    if response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        assert response.status_code == 200  # a stream: its errors are events (tested elsewhere)
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    check_format(case.path, response.status_code, body)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_5xx_and_errors_in_the_routes_format(api, mode) -> None:
    """Every operation, a bounded number of examples each (schemathesis' own pytest plugin
    does not run on this pytest, so the operations are driven with hypothesis directly)."""
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 15
    if mode == GenerationMode.NEGATIVE:  # only what takes input can be given bad input
        operations = [op for op in operations if len(op.body) or len(op.path_parameters)
                      or len(op.query)]
        assert len(operations) >= 8
    for op in operations:
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck),
                  phases=(Phase.explicit, Phase.generate))  # no shrinking: bounded time
        @given(case=op.as_strategy(generation_mode=mode))
        def run(case) -> None:
            call(case)

        try:
            run()
        except Unsatisfiable:
            # e.g. a free-form path parameter and no body (GET, or POST .../cancel): no value
            # breaks its schema; an operation with a body always has bad bodies
            assert mode == GenerationMode.NEGATIVE and not len(op.body), op.label
