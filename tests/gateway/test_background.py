"""Background mode and cancel, driven with the SDK as the Open Responses suite and
the SDK's tests drive them.

``background: true`` answers at once (``queued``); the turn runs on the tier's engine (its
modeled times and usage are a normal turn's), its status goes queued -> in_progress ->
completed as the engine says, polled with retrieve; ``cancel`` stops it (billed for what was
generated), once and for all; the events can be streamed and replayed from a sequence number;
it belongs to its key. ``store: false`` and continuing a running response are 400s, and so is
cancelling a response that was not run in the background.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import launch, quick_config_text, stop_server

# the ranks a status may take: never backwards; a reply cut at max_output_tokens ends "incomplete"
RANK = {"queued": 0, "in_progress": 1, "completed": 2, "incomplete": 2}
KEY_A = "sk-background-a-2b7d9f1c3e5a46802b7d9f1c3e5a4680"
KEY_B = "sk-background-b-6e0c8a2f4d1b93576e0c8a2f4d1b9357"


def sdk(base: str, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)


def poll(client: openai.OpenAI, rid: str, until: set[str], every: float = 0.05,
         limit: float = 60.0) -> list[Any]:
    """Retrieve ``rid`` until its status is in ``until``; every object seen."""
    seen = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        seen.append(client.responses.retrieve(rid))
        if seen[-1].status in until:
            return seen
        time.sleep(every)
    raise AssertionError(f"{rid} still {seen[-1].status} after {limit:g} s")


def test_a_background_response_runs_queued_in_progress_completed(live_server: str) -> None:
    client = sdk(live_server)
    created = client.responses.create(model="frontier", input="Tell me about the sea.",
                                      background=True, max_output_tokens=300)
    assert created.background is True and created.status in ("queued", "in_progress")
    assert created.completed_at is None and created.usage is None
    seen = poll(client, created.id, {"completed", "incomplete"})
    statuses = [r.status for r in seen]
    assert "in_progress" in statuses  # it ran while it was polled
    ranks = [RANK[s] for s in [created.status, *statuses]]
    assert ranks == sorted(ranks)  # never backwards
    done = seen[-1]
    assert done.background is True
    assert done.output_text and done.usage.output_tokens > 0
    if done.status == "incomplete":  # the mock's reply ran past the cap: cut exactly there
        assert done.incomplete_details.reason == "max_output_tokens"
        assert done.usage.output_tokens == 300
    else:
        assert done.status == "completed" and done.usage.output_tokens <= 300
    # it ran on the engine: a normal turn's modeled times, and completed_at follows them (only
    # a completed response has one)
    info = done.model_extra["time_info"]
    assert info["completion_time"] > 0
    expected = int(done.created_at) + round(info["total_time"])
    assert done.completed_at == (expected if done.status == "completed" else None)


def test_cancel_stops_it_bills_what_was_generated_and_is_idempotent(live_server: str) -> None:
    client = sdk(live_server)
    created = client.responses.create(model="frontier", input="Write a very long story.",
                                      background=True, max_output_tokens=4000,
                                      extra_body={"ignore_eos": True})
    running = poll(client, created.id, {"in_progress"})[-1]
    assert running.status == "in_progress"
    time.sleep(0.3)  # a few tokens
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert 0 < cancelled.usage.output_tokens < 4000
    assert client.responses.retrieve(created.id).status == "cancelled"
    again = client.responses.cancel(created.id)
    assert again.status == "cancelled"
    assert again.usage.output_tokens == cancelled.usage.output_tokens


def test_what_cannot_be_backgrounded_or_cancelled(quick_server: str) -> None:
    client = sdk(quick_server)
    with pytest.raises(openai.BadRequestError) as unstored:
        client.responses.create(model="frontier", input="hi", background=True, store=False)
    assert unstored.value.param == "store"
    plain = client.responses.create(model="frontier", input="hi", max_output_tokens=4)
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(plain.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nobody_made_this")


def test_a_running_response_cannot_be_continued(live_server: str) -> None:
    client = sdk(live_server)
    created = client.responses.create(model="frontier", input="A long tale, please.",
                                      background=True, max_output_tokens=4000,
                                      extra_body={"ignore_eos": True})
    with pytest.raises(openai.BadRequestError) as early:
        client.responses.create(model="frontier", input="and then?",
                                previous_response_id=created.id)
    assert early.value.param == "previous_response_id"
    client.responses.cancel(created.id)


def test_streamed_and_replayed_from_a_sequence_number(quick_server: str) -> None:
    body = {"model": "frontier", "input": "hi", "background": True, "stream": True,
            "max_output_tokens": 64}
    with httpx.stream("POST", quick_server + "/v1/responses", json=body, timeout=30) as answer:
        events = [json.loads(line[6:]) for line in answer.iter_lines()
                  if line.startswith("data: ")]
    assert events[0]["type"] == "response.created"
    assert events[0]["response"]["status"] == "queued"
    assert events[0]["response"]["background"] is True
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    rid = events[0]["response"]["id"]
    url = f"{quick_server}/v1/responses/{rid}?stream=true&starting_after=3"
    with httpx.stream("GET", url, timeout=30) as replay:
        again = [json.loads(line[6:]) for line in replay.iter_lines()
                 if line.startswith("data: ")]
    assert again == events[4:]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory):
    """A gateway with auth on and two keys."""
    tmp: Path = tmp_path_factory.mktemp("background-auth")
    text = quick_config_text()
    auth = text.index("[auth]\nenabled = false")
    end = text.index("\n", auth + len("[auth]\n"))
    text = (text[:auth] + f'[auth]\nenabled = true\n[[auth.keys]]\nkey = "{KEY_A}"\n'
            f'[[auth.keys]]\nkey = "{KEY_B}"\n' + text[end + 1:])
    proc, url = launch(config_text=text, tmp=tmp)
    try:
        yield url
    finally:
        stop_server(proc)


def test_a_background_response_is_its_keys_alone(keyed: str) -> None:
    a, b = sdk(keyed, KEY_A), sdk(keyed, KEY_B)
    created = a.responses.create(model="frontier", input="hi", background=True,
                                 max_output_tokens=4000, extra_body={"ignore_eos": True})
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        b.responses.cancel(created.id)
    assert a.responses.cancel(created.id).status == "cancelled"
