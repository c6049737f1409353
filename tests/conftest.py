"""Shared fixtures: a real gateway on a loopback port the OS picked, as a user would run it.

Parallel-safe (``pytest -n 2``): every server a test starts binds port 0 and the test reads the
port back from the server (``fastmode serve`` prints its address once the socket is bound), so
two workers never race for one port; scratch files (the usage ledger) are per process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

# a port for a program that must be told its port up front (redis-server, chromedriver): one
# implementation for the tests, the benchmarks and the compose run (see its docstring)
from bench.harness import free_port  # noqa: F401  (re-exported to the test modules)

ROOT = Path(__file__).resolve().parent.parent
# every gateway the tests start (in process or as `fastmode serve`) keeps its usage ledger in a
# scratch file of this process (gateway.config: [state] path), not in the working directory;
# xdist workers inherit the controller's environment, so each one makes its own
if os.environ.get("FASTMODE_LEDGER") in (None, os.environ.get("FASTMODE_TESTS_LEDGER")):
    _ledger = str(Path(tempfile.mkdtemp(prefix="fastmode-tests-")) / "ledger.sqlite3")
    os.environ["FASTMODE_LEDGER"] = os.environ["FASTMODE_TESTS_LEDGER"] = _ledger

# The test files that take 4 s or more (their tests' summed durations, longest first), run
# first. `make test` hands whole files to its workers (--dist loadfile) in collection order
# (--no-loadscope-reorder: xdist would sort the files by their number of tests), so a long file
# collected late ran alone at the end (a ~50 s tail in CI); longest first leaves the short ones
# to fill in. Only a schedule: a stale entry costs time, never a result.
SLOWEST_FILES = (
    "clients/test_coding_agents.py", "gateway/test_schemathesis.py", "gateway/test_replay.py",
    "gateway/test_workers.py",
    "gateway/test_dashboard.py", "gateway/test_faults.py", "gateway/test_openai_sdk.py",
    "gateway/test_remote.py", "gateway/test_replay_workers.py", "gateway/test_ws.py",
    "gateway/test_replay_matching.py", "gateway/test_overload.py", "gateway/test_redis_outage.py",
    "gateway/test_tenancy.py", "gateway/test_connections.py", "clients/test_bench_e2e.py",
    "gateway/test_raw_reasoning.py", "gateway/test_no_cycles.py", "gateway/test_shutdown.py",
    "backends/test_mockmodel_reasoning.py", "gateway/test_hostile.py",
    "gateway/test_remote_protocols.py", "gateway/test_structured_outputs.py",
    "gateway/test_limits.py", "gateway/test_background.py", "gateway/test_reasoning.py",
    "backends/test_fleet.py", "gateway/test_redis_state.py", "gateway/test_ledger.py",
    "gateway/test_roles.py", "gateway/test_push.py", "gateway/test_serve_cli.py",
    "gateway/test_stored_chat.py", "backends/test_calibrate.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    tests = Path(__file__).parent

    def key(item: pytest.Item) -> int:
        if not item.path.is_relative_to(tests):  # examples/
            return len(rank)
        return rank.get(item.path.relative_to(tests).as_posix(), len(rank))

    items.sort(key=key)  # stable: the others keep their order, and each file its tests'


# `fastmode serve` prints this line (single process and --workers) once its socket is bound
BANNER = re.compile(rb"OpenAI base_url:\s+(http://\S+?)/v1\s")
# how many times faster the hardware of ``quick_server`` is (see quick_config_text)
QUICK = 40


def bound_socket() -> socket.socket:
    """A loopback TCP socket bound to a port the OS picked (for in-process servers: uvicorn
    takes it with ``sockets=[...]``; left unlistened, it is a port where nothing answers)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def quick_config_text(text: str | None = None, k: float = QUICK) -> str:
    """The config (default: the built-in one) on hardware ``k`` times faster: every time
    constant of the profile of each of its deployments' hardware divided by ``k`` and its
    hourly price multiplied by ``k``. Every modeled duration is then ``k`` times shorter and
    every price (the derived ones too: hardware-seconds x price) is the same. For tests that
    check *what* the gateway serves, not how fast; the shipped default is never changed."""
    from fastmode.backends.profiles import Catalog
    from fastmode.gateway.config import default_config_text

    text = default_config_text() if text is None else text
    raw = tomllib.loads(text)
    catalog = Catalog.builtin()
    tables = []
    for name in sorted({d["hardware"] for d in raw["deployments"].values()}):
        assert name not in raw.get("hardware", {}), f"{name}: a profile of the config's own"
        hw = dataclasses.asdict(catalog.get_hardware(name))
        del hw["name"]
        for key in ("memory_bandwidth_tbs", "interconnect_gbs", "price_per_hour_usd",
                    "scale_out_gbs"):
            hw[key] *= k
        hw["tflops"] = {p: v * k for p, v in hw["tflops"].items()}
        for key in ("interconnect_latency_us", "step_overhead_ms", "layer_latency_us",
                    "request_overhead_ms", "seq_overhead_us", "moe_layer_latency_us",
                    "mla_layer_latency_us", "scale_out_latency_us"):
            hw[key] /= k
        body = "\n".join(f"{key} = {_toml(v)}" for key, v in hw.items() if v is not None)
        tables.append(f"[hardware.{name}]  # tests: {k:g}x faster\n{body}\n")
    return text + "\n\n" + "\n".join(tables)


def _toml(v: object) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{a} = {_toml(b)}" for a, b in v.items()) + " }"
    return f'"{v}"' if isinstance(v, str) else repr(v)


class SdkClock:
    """An SDK's ``time`` module, except that a retry's wait is recorded (and ``during`` run)
    instead of slept: a test sees what the SDK would wait, without waiting. Install it with
    ``monkeypatch.setattr(openai._base_client, "time", clock)``."""

    def __init__(self, during=lambda: None) -> None:
        self.waits: list[float] = []
        self.during = during

    def __getattr__(self, name: str):
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.during()


def launch(*args: str, config_text: str | None = None, tmp: Path | None = None,
           cwd: Path = ROOT, env: Mapping[str, str] | None = None,
           log: IO[bytes] | None = None, timeout: float = 30.0,
           ) -> tuple[subprocess.Popen[bytes], str]:
    """``fastmode serve --port 0 ARGS`` in a subprocess, healthy; returns (process, base URL).

    The OS picks the port when the server binds it (no free-port race between xdist workers);
    the URL is read from the server's banner. The server's stderr goes to ``log`` (default: a
    scratch file, quoted if the server fails to start), never to an unread pipe."""
    cmd = [sys.executable, "-m", "fastmode", "serve", "--port", "0", *args]
    if config_text is not None:
        assert tmp is not None
        with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix="config-", dir=tmp,
                                         delete=False) as f:
            f.write(config_text)
        cmd += ["--config", f.name]
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile() if log is None else log
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err,
                            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"})
    url = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err.seek(0)
            raise RuntimeError(f"server exited: {err.read().decode()[-2000:]}")
        if not url:
            out.seek(0)
            found = BANNER.search(out.read())
            url = found.group(1).decode() if found else ""
        if url:
            try:
                if httpx.get(url + "/healthz", timeout=0.5).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"server did not become healthy in {timeout:g} s")


def start_server(*args: str, config_text: str | None = None, tmp: Path | None = None,
                 ) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``fastmode serve`` in a subprocess; returns (process, base URL)."""
    return launch(*args, config_text=config_text, tmp=tmp)


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


@pytest.fixture(scope="session")
def quick_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway on the built-in config with ``QUICK`` times faster hardware
    (``quick_config_text``): the same tiers, models, behaviour and prices, every tier
    streaming ``QUICK`` times faster. For tests of what is served, not of how fast."""
    proc, url = start_server(config_text=quick_config_text(),
                             tmp=tmp_path_factory.mktemp("quick"))
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


@contextlib.asynccontextmanager
async def started_app(tmp_path: Path, text: str = "") -> AsyncIterator[Any]:
    """The gateway's ASGI app on ``text`` (a config file laid over the default) with its own
    state file in ``tmp_path``, its lifespan started and stopped around the block."""
    from fastmode.gateway.app import create_app
    from fastmode.gateway.config import load_config

    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    config = load_config(cfg)
    config = config.model_copy(update={"state": config.state.model_copy(
        update={"path": str(tmp_path / "l.db")})})
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


@contextlib.asynccontextmanager
async def asgi_client(config: Any, base_url: str = "http://t") -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the gateway (or engine) app of ``config``, its lifespan started and
    stopped around the block; ``client.app`` is the app."""
    from fastmode.gateway.app import create_app

    app = create_app(config)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url=base_url) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client
