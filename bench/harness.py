"""What every benchmark script needs to run servers on loopback: ports, health, stop, CPU time.

The scripts run as ``python bench/NAME.py``, so this module is importable as ``harness``.
Every wait is bounded; servers are only ever started on 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen | None = None, timeout: float = 60.0,
                 path: str = "/healthz") -> None:
    """Until ``GET path`` answers 200 (raw socket: no client library in the way)."""
    deadline = time.monotonic() + timeout
    request = f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode()
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server on {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(request)
                if b" 200 " in s.recv(100):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"server on {port} not healthy after {timeout:.0f} s")


def start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})


def start_gateway(*args: str) -> tuple[subprocess.Popen, str]:
    """``fastmode serve --port P ARGS...`` on a free port, healthy; returns (process, base URL)."""
    port = free_port()
    proc = start([sys.executable, "-m", "commands", "serve", "--port", str(port), *args])
    try:
        wait_healthy(port, proc)
    except RuntimeError:
        stop(proc)
        raise
    return proc, f"http://127.0.0.1:{port}"


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
