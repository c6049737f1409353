"""``fastmode serve`` validates and binds before it prints: a bad or busy port is a one-line
error with exit status 2, never a hang or a "ready" banner followed by a failure."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fastmode", "serve", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_an_invalid_port_is_a_one_line_error() -> None:
    r = serve("--port", "99999")
    assert r.returncode == 2
    assert r.stdout == ""  # no banner
    assert r.stderr.startswith("fastmode serve: error: --port:") and "65535" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_busy_port_fails_before_the_banner() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = serve("--port", str(s.getsockname()[1]))
    assert r.returncode == 2
    assert r.stdout == ""
    assert "cannot listen on 127.0.0.1:" in r.stderr and "Traceback" not in r.stderr


def test_an_unwritable_ledger_is_a_one_line_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the ledger's directory should be
    r = serve("--port", "0", "--ledger", str(blocker / "ledger.sqlite3"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("fastmode serve: error: --ledger: cannot open")


def test_the_banner_names_redis_when_the_state_is_there() -> None:
    """With ``[state] redis_url`` the ledger is in Redis: the banner says so (without the
    URL's password), not the SQLite file that is never opened."""
    env = {**os.environ, "FASTMODE_REDIS_URL": "redis://:s3cret@127.0.0.1:1/0"}
    proc = subprocess.Popen([sys.executable, "-m", "fastmode", "serve", "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, text=True)
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 60
        while "usage ledger" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert "usage ledger" in line, line
        assert "Redis at redis://127.0.0.1:1/0" in line and "s3cret" not in line
        assert "sqlite" not in line.lower()
    finally:
        proc.kill()
        proc.wait()
