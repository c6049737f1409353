"""The pytest plugin (entry point ``pytest11``: on once fastmode is installed).

One gateway per test session (per xdist worker: each worker is a session), started the first
time a test asks for the ``fastmode`` fixture; config and time scale from the ini options
``fastmode_config`` / ``fastmode_time_scale`` or ``--fastmode-config`` /
``--fastmode-time-scale``. The ``fastmode`` fixture scopes everything to the test by a test id
that the clients it hands out send (``x-fastmode-test-id``): the replies and faults it sets
apply to that test's requests only, and ``requests`` is that test's journal. The state lives in
the server, keyed by the test id, and is dropped when the test ends.

    def test_weather(fastmode):
        fastmode.reply(match=r"weather in (\\w+)", tool_call={"name": "get_weather",
                                                           "arguments": {"city": "\\\\1"}})
        ...
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fastmode.server import Server

TEST_ID_HEADER = "x-fastmode-test-id"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fastmode")
    group.addoption("--fastmode-config", default=None,
                    help="TOML config of the fastmode test server (default: the built-in one)")
    group.addoption("--fastmode-time-scale", type=float, default=None,
                    help="wall seconds per modeled second of the test server (default 0.01)")
    parser.addini("fastmode_config", "TOML config of the fastmode test server", default="")
    parser.addini("fastmode_time_scale", "wall seconds per modeled second (default 0.01)",
                  default="0.01")


@dataclass(frozen=True)
class Call:
    """One request of the test, as the server saw and answered it."""

    protocol: str
    model: str
    role: str
    tier: str
    messages: list[Any]
    tools: list[str]
    reply: dict[str, Any]  # text, tool_calls ({id, name, arguments}), finish_reason
    usage: dict[str, int]
    cost_usd: float
    scripted: bool  # answered by one of the test's replies
    raw: dict[str, Any]


class FastmodeTest:
    """The ``fastmode`` fixture: this test's replies, faults, clients and journal."""

    def __init__(self, server: Server, test_id: str, root: Path | None = None) -> None:
        self.server = server
        self.test_id = test_id
        self.url = server.url
        self.root = root or Path.cwd()  # where a relative cassette path is (the test's folder)
        self._admin = {"authorization": f"Bearer {server.admin_key}"}
        self._misses_seen = 0

    def _post(self, what: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        r = httpx.post(f"{self.url}/admin/tests/{self.test_id}/{what}", json=body,
                       headers=self._admin, timeout=10)
        if r.status_code != 201:
            name = {"replies": "reply", "faults": "fail"}.get(what, what)
            raise ValueError(f"fastmode.{name}: "
                             f"{r.json().get('error', {}).get('message', r.text)}")
        result: dict[str, Any] = r.json()
        return result

    def reply(self, match: str, *, text: str | None = None,
              tool_call: dict[str, Any] | None = None, json: Any = None,
              times: int | None = None) -> None:
        """Answer this test's requests whose last message matches ``match`` (a regex) with
        ``text``, a ``tool_call`` ({"name", "arguments"}; string arguments may use the
        match's groups, ``\\1`` or ``\\g<name>``) or ``json`` (a value, sent as JSON text);
        ``times`` uses at most (default: any number). The first rule that matches wins."""
        body: dict[str, Any] = {"match": match, "times": times}
        for name, value in (("text", text), ("tool_call", tool_call), ("json", json)):
            if value is not None:
                body[name] = value
        self._post("replies", body)

    def fail(self, kind: str, *, times: int = 1, after: int = 0, s: float | None = None,
             tier: str | None = None, model: str | None = None) -> None:
        """This test's next ``times`` matching requests get the fault ``kind`` (the
        ``x-fastmode-fault`` kinds: ``429``, ``500``, ``503``, ``529``, ``timeout``, ``cut``,
        ``stall``, ...), counted in order: ``fail("429")`` then a retry succeeds."""
        body: dict[str, Any] = {"kind": kind, "times": times, "after": after}
        for name, value in (("s", s), ("tier", tier), ("model", model)):
            if value is not None:
                body[name] = value
        self._post("faults", body)

    def cassette(self, path: str | os.PathLike[str], mode: str = "once") -> Path:
        """Record this test's exchanges to ``path`` (a ``.jsonl`` cassette, relative to the
        test's folder) or replay them from it. ``mode``: ``record`` (written anew),
        ``replay`` (only from the file: a request it does not hold gets a 404
        ``cassette_miss`` and fails the test), ``once`` (replay if the file has exchanges,
        else record), ``new_episodes`` (replay what it holds, record the rest). Returns the
        file's path."""
        full = Path(path) if Path(path).is_absolute() else self.root / path
        self._post("cassette", {"path": str(full), "mode": mode})
        return full

    @property
    def cassette_misses(self) -> list[str]:
        """Why each request this test's cassette did not hold was refused. Misses the test
        has not read here fail it at its end, even when the code under test caught the 404;
        the ones read are the test's to judge."""
        cassette = self._state().get("cassette") or {}
        misses = list(cassette.get("misses") or [])
        self._misses_seen = len(misses)
        return misses

    @property
    def headers(self) -> dict[str, str]:
        """The header that scopes a request to this test (for clients of your own)."""
        return {TEST_ID_HEADER: self.test_id}

    def openai(self, **kwargs: Any) -> Any:
        """An ``openai.OpenAI`` client on the server, tagged with this test's id."""
        kwargs["default_headers"] = {**self.headers, **kwargs.get("default_headers", {})}
        return self.server.openai(**kwargs)

    def anthropic(self, **kwargs: Any) -> Any:
        """An ``anthropic.Anthropic`` client on the server, tagged with this test's id."""
        kwargs["default_headers"] = {**self.headers, **kwargs.get("default_headers", {})}
        return self.server.anthropic(**kwargs)

    def _state(self) -> dict[str, Any]:
        import httpx

        r = httpx.get(f"{self.url}/admin/tests/{self.test_id}", headers=self._admin,
                      timeout=10)
        r.raise_for_status()
        state: dict[str, Any] = r.json()
        return state

    @property
    def requests(self) -> list[Call]:
        """This test's requests so far, in the order the server admitted them."""
        return [Call(e["protocol"], e["model"], e["role"], e["tier"], e["messages"],
                     e["tools"], e["reply"], e["usage"], e["cost_usd"], e["scripted"], e)
                for e in self._state()["journal"]]

    def assert_all_replies_used(self) -> None:
        """Every reply was used (a ``times`` reply: that many times)."""
        unused = [r for r in self._state()["replies"]
                  if r["used"] == 0 or (r["times"] is not None and r["used"] < r["times"])]
        assert not unused, f"fastmode replies not used: {unused}"

    def assert_no_unexpected_calls(self) -> None:
        """Every request of the test was answered by one of its replies."""
        extra = [c for c in self.requests if not c.scripted]
        assert not extra, ("fastmode requests no reply was scripted for: "
                           f"{[c.messages[-1] if c.messages else None for c in extra]}")


def _option(config: pytest.Config, flag: str, ini: str) -> str:
    value = config.getoption(flag)
    return str(value) if value is not None else str(config.getini(ini) or "")


@pytest.fixture(scope="session")
def fastmode_server(pytestconfig: pytest.Config) -> Iterator[Server]:
    """The session's gateway (one per xdist worker), with the admin API on for the plugin."""
    config = _option(pytestconfig, "fastmode_config", "fastmode_config") or None
    scale = float(_option(pytestconfig, "fastmode_time_scale", "fastmode_time_scale") or 0.01)
    if config is not None and not os.path.isabs(config):
        config = str(pytestconfig.rootpath / config)
    with Server(config, scale, admin_key=secrets.token_hex(16)) as server:
        yield server


@pytest.fixture
def fastmode(fastmode_server: Server, request: pytest.FixtureRequest) -> Iterator[FastmodeTest]:
    """This test's view of the session's gateway (see ``FastmodeTest``)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    digest = hashlib.sha256(f"{worker}:{request.node.nodeid}".encode()).hexdigest()[:24]
    test = FastmodeTest(fastmode_server, f"t-{digest}", request.path.parent)
    yield test
    import httpx

    report = getattr(request.node, "_fastmode_call", None)
    seen = test._misses_seen
    misses = test.cassette_misses[seen:] if report is not None and report.passed else []

    httpx.delete(f"{test.url}/admin/tests/{test.test_id}", headers=test._admin, timeout=10)
    if misses:  # the code under test swallowed the 404: the test still fails, saying why
        pytest.fail(f"fastmode cassette: {len(misses)} request(s) not in the cassette: "
                    f"{misses[0]}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """The call's outcome, for the ``fastmode`` fixture's end (a cassette's misses)."""
    report = yield
    if call.when == "call":
        item._fastmode_call = report  # type: ignore[attr-defined]
    return report
