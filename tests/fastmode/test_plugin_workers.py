"""The plugin's per-test state on ``fastmode serve --workers 2``: replies, faults and a
cassette registered through one worker are every worker's, a counted use is counted once for
all, and the journal is gathered from both (requests on new connections reach both)."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastmode.pytest_plugin import FastmodeTest
from fastmode.server import Server

KEY = "workers-admin-key"


@pytest.fixture
def workers(server_factory) -> FastmodeTest:
    url = server_factory("--workers", "2", config_text=f'[admin]\nenabled = true\nkey = "{KEY}"\n')
    deadline = time.monotonic() + 60
    while _scraped(url) < 2:  # the port answers once the first worker listens
        assert time.monotonic() < deadline, "the second worker did not start"
        time.sleep(0.1)
    server = Server(admin_key=KEY)
    server.url = url  # (started by the factory: a stand-in for the plugin's session server)
    return FastmodeTest(server, "t-workers")


def _fresh(test: FastmodeTest) -> openai.OpenAI:
    """A client that opens a new connection per request (the kernel spreads them)."""
    http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0), timeout=30)
    return test.openai(max_retries=0, http_client=http)


def _scraped(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return fams["fastmode_workers_scraped"].samples[0].value


def _per_worker(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "fastmode_requests_total":
                out[s.labels["worker"]] = out.get(s.labels["worker"], 0) + s.value
    return out


def test_replies_faults_and_the_journal_span_the_workers(workers, tmp_path) -> None:
    workers.reply(match="hello", text="scripted once for all", times=3)
    workers.fail("503", times=2)
    client = _fresh(workers)
    answers, failed = [], 0
    for i in range(14):
        try:
            r = client.chat.completions.create(
                model="frontier-spark", messages=[{"role": "user", "content": f"hello {i}"}])
            answers.append(r.choices[0].message.content)
        except openai.InternalServerError:
            failed += 1
    assert failed == 2
    assert answers.count("scripted once for all") == 3
    served = _per_worker(workers.url)
    assert set(served) == {"0", "1"} and min(served.values()) > 0, served
    calls = workers.requests
    assert len(calls) == 12 and sum(c.scripted for c in calls) == 3
    assert [c.raw["at"] for c in calls] == sorted(c.raw["at"] for c in calls)
    assert [c.messages[-1]["content"] for c in calls] == sorted(
        (c.messages[-1]["content"] for c in calls), key=lambda s: int(s.split()[1]))
    workers.assert_all_replies_used()

    path = workers.cassette(tmp_path / "w.jsonl", "record")
    asks = [[{"role": "user", "content": f"city {i}"}] for i in range(6)]
    live = [client.chat.completions.create(model="frontier-spark", messages=m).id for m in asks]
    assert len(path.read_text().splitlines()) == 6  # both workers appended to the one file
    workers.cassette(path, "replay")
    again = [client.chat.completions.create(model="frontier-spark", messages=m).id
             for m in asks]
    assert again == live
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="frontier-spark",
                                       messages=[{"role": "user", "content": "elsewhere"}])
    assert len(workers.cassette_misses) == 1
    httpx.delete(f"{workers.url}/admin/tests/{workers.test_id}", headers=workers._admin)
    assert workers.requests == []
