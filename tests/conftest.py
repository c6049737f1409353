"""Shared fixtures: a real gateway on a free loopback port, as a user would run it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
# every gateway the tests start (in process or as `fastmode serve`) keeps its usage ledger in a
# scratch file, not in the working directory (gateway.config: [state] path)
os.environ.setdefault("FASTMODE_LEDGER",
                      str(Path(tempfile.mkdtemp(prefix="fastmode-tests-")) / "ledger.sqlite3"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*args: str, config_text: str | None = None, tmp: Path | None = None):
    """Start ``fastmode serve`` in a subprocess; returns (process, base URL)."""
    port = free_port()
    cmd = [sys.executable, "-m", "commands", "serve", "--port", str(port), *args]
    if config_text is not None:
        assert tmp is not None
        path = tmp / f"config-{port}.toml"
        path.write_text(config_text)
        cmd += ["--config", str(path)]
    # the server's log goes to a file, never to an unread pipe that could fill and stall it
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"server exited: {log.read().decode()[-2000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=0.5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not become healthy in 30 s")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    """The gateway on its built-in default config; yields the base URL (no /v1)."""
    proc, url = start_server()
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture
def server_factory(tmp_path: Path):
    """Start extra servers with their own config text or flags; all stopped at the end."""
    procs: list[subprocess.Popen] = []

    def make(*args: str, config_text: str | None = None) -> str:
        proc, url = start_server(*args, config_text=config_text, tmp=tmp_path)
        procs.append(proc)
        return url

    yield make
    for p in procs:
        stop_server(p)
