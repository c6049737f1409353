"""What every benchmark script needs to run servers on loopback: ports, health, stop, CPU time.

The benchmarks, ``scripts/`` and the tests import it as ``bench.harness``.
Every wait is bounded; servers are only ever started on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A loopback port to hand to a server that must be told its port. Not pick-and-hope: the
    port is bound, listened on and connected to once, and the accepted end closed first, so it
    sits in TIME_WAIT for a minute: the kernel gives it to no other ``bind(port 0)`` nor
    outgoing connection meanwhile (another test or benchmark process cannot take it first),
    while a server binding it with SO_REUSEADDR (uvicorn, `fastmode serve`, redis-server)
    takes it at once."""
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port: int = srv.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as cli:
            conn, _ = srv.accept()
            conn.close()  # the port's own end closes first: it is the one left in TIME_WAIT
            cli.recv(1)
    return port


def wait_healthy(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 60.0,
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


def start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})


def start_gateway(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    """``fastmode serve --port P ARGS...`` on a free port, healthy; returns (process, base URL)."""
    port = free_port()
    proc = start([sys.executable, "-m", "fastmode", "serve", "--port", str(port), *args])
    try:
        wait_healthy(port, proc)
    except RuntimeError:
        stop(proc)
        raise
    return proc, f"http://127.0.0.1:{port}"


def stop(*procs: subprocess.Popen[bytes]) -> None:
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
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU time of a process so far (Linux /proc): the system part is the
    kernel's work on the process's behalf (its socket writes, mostly), which no Python the
    process runs can make cheaper."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


# -- one core each: the server on one, the client on the other ------------------------------

def cores() -> list[int]:
    """The CPUs this process may run on, sorted."""
    return sorted(os.sched_getaffinity(0))


def pin_self(core: int | None) -> None:
    """Run this process (the client) on ``core`` only; None leaves it as it is."""
    if core is not None:
        os.sched_setaffinity(0, {core})


@contextlib.contextmanager
def yielding() -> Iterator[None]:
    """Run this process (the load generator) at ``SCHED_IDLE`` for the block: it gets a core
    only when no server process wants it, so its polls never delay a replica's step (a step
    served late slips, and the streams fall below their modeled rate for the client's sake,
    not the server's). Processes started inside the block would inherit the policy: start
    servers before it. Restored after (as root; otherwise the process stays idle-scheduled,
    which only matters to later servers it starts, hence the warning)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the client runs as it is
        yield
        return
    try:
        yield
    finally:
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except OSError:
            print("warning: could not leave SCHED_IDLE; later servers inherit it",
                  file=sys.stderr)


def start_pinned(argv: list[str], core: int | None) -> subprocess.Popen[bytes]:
    """A server process bound to ``core`` from its first instruction (threads included)."""
    def pin() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})

    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=pin)


# -- config files ---------------------------------------------------------------------------

def toml_dumps(data: dict[str, Any], prefix: str = "") -> str:
    """TOML for what ``tomllib`` reads from fastmode's config (tables, arrays of tables,
    scalars, lists of scalars), so a bench can patch the built-in config by key, not by text."""
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and not _tables(v)}
    lines = [f"{_key(k)} = {_value(v)}" for k, v in scalars.items()]
    out = ([f"[{prefix}]"] if prefix and (lines or not data) else []) + lines
    for k, v in data.items():
        name = f"{prefix}.{_key(k)}" if prefix else _key(k)
        if isinstance(v, dict):
            out.append(toml_dumps(v, name))
        elif _tables(v):
            for item in v:
                out.append(f"[[{name}]]")
                out.append(toml_dumps(item, "").strip())
    return "\n".join(line for line in out if line) + "\n"


def _tables(v: object) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _key(k: str) -> str:
    return k if k.replace("-", "").replace("_", "").isalnum() else _value(k)


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def run_client(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a benchmark's client on uvloop when it is installed (the client's own cost per
    event is what limits how many streams it reads), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
