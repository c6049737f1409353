"""Fixtures of the integration suite: a running topology, found through the environment.

- ``FASTMODE_GATEWAY_URL``: the gateway's base URL (no /v1). Without it the suite is skipped,
  so a plain ``pytest`` / ``make test`` does not run it.
- ``FASTMODE_TOPOLOGY_FILE``: set by scripts/integration.py (``make test-integration``): the
  processes of the topology as JSON, so tests may kill and restart engines. Without it (in
  docker-compose, where the test container cannot reach the others' processes) the
  kill/restart tests are skipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

GATEWAY_URL = os.environ.get("FASTMODE_GATEWAY_URL", "").rstrip("/")
TOPOLOGY_FILE = os.environ.get("FASTMODE_TOPOLOGY_FILE", "")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: needs a running topology (FASTMODE_GATEWAY_URL); "
        "`make test-integration` starts one"
    )


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus text -> {(name, frozenset(label items)): value}."""
    out: dict[tuple[str, frozenset], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if "{" in head:
            name, _, rest = head.partition("{")
            labels = []
            for part in rest.rstrip("}").split('",'):
                if "=" in part:
                    k, _, v = part.partition("=")
                    labels.append((k.strip(), v.strip().strip('"')))
            out[(name, frozenset(labels))] = float(value)
        else:
            out[(head, frozenset())] = float(value)
    return out


def metrics(url: str) -> dict[tuple[str, frozenset], float]:
    return parse_metrics(httpx.get(url + "/metrics", timeout=5).text)


def metric_sum(snapshot: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in snapshot.items() if n == name and want <= lab)


def upstreams(gateway: str) -> dict[str, dict[str, bool]]:
    """{tier: {upstream URL: in rotation}}, from the gateway's metrics."""
    out: dict[str, dict[str, bool]] = {}
    for (name, labels), value in metrics(gateway).items():
        if name == "fastmode_upstream_up":
            d = dict(labels)
            out.setdefault(d["tier"], {})[d["upstream"]] = value == 1.0
    return out


class Topology:
    """The processes scripts/integration.py started; kill and restart engines by name."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def state(self) -> dict:
        return json.loads(self.path.read_text())["services"]

    def url(self, name: str) -> str:
        return self.state()[name]["url"]

    def name_of(self, url: str) -> str:
        return next(n for n, s in self.state().items() if s["url"] == url)

    def alive(self, name: str) -> bool:
        try:
            return httpx.get(self.url(name) + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash: no graceful shutdown, sockets reset by the kernel."""
        pid = self.state()[name]["pid"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.alive(name):
            time.sleep(0.05)
        assert not self.alive(name), f"{name} still answers after SIGKILL"

    def restart(self, name: str, timeout: float = 30) -> None:
        state = json.loads(self.path.read_text())
        s = state["services"][name]
        with open(s["log"], "ab") as log:
            proc = subprocess.Popen(
                s["argv"], cwd=s["cwd"], stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **s["env"]}, start_new_session=True,
            )
        s["pid"] = proc.pid  # the runner stops it at the end, by this pid
        tmp = self.path.with_suffix(".restart")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{name} exited with {proc.returncode} on restart"
            if self.alive(name):
                return
            time.sleep(0.1)
        raise AssertionError(f"{name} not healthy {timeout} s after restart")


@pytest.fixture(scope="session")
def gateway_url() -> str:
    if not GATEWAY_URL:
        pytest.fail("no topology: set FASTMODE_GATEWAY_URL or run `make test-integration`")
    return GATEWAY_URL


@pytest.fixture(scope="session")
def topology() -> Topology:
    if not TOPOLOGY_FILE:
        pytest.fail(
            "needs FASTMODE_TOPOLOGY_FILE (scripts/integration.py) to kill engines; in compose "
            "these tests are deselected with -m 'not process_control'"
        )
    return Topology(Path(TOPOLOGY_FILE))
