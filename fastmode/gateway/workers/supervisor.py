"""``fastmode serve --workers N``: N worker processes on one port, replicas partitioned.

- Each worker is a whole gateway (``create_app``) on its partition of the replicas
  (``partition``), in its own process (``multiprocessing`` spawn) with its own event loop: one
  core each.
- One port: every worker listens on its own socket bound with ``SO_REUSEPORT`` to the same
  address, and the kernel spreads new connections over them (by a hash of the connection, so
  evenly in number). A connection, hence a keep-alive client or a websocket, stays with one
  worker; since every worker owns a replica of every in-process deployment, any worker can
  serve any request, on the least-loaded of its own replicas. (Least-outstanding routing
  therefore applies within a worker, not across workers.)
- Shared state: rate limits, stored responses (``previous_response_id`` on a new connection
  may reach another worker) and usage totals go through ``[state]``: Redis when
  ``redis_url`` is set; otherwise the workers share the SQLite file (a stored response is
  visible to the other workers once flushed, within ``flush_interval_s``; keys with limits need
  Redis, see ``partition``).
- ``/metrics`` gathers every worker's metrics (``aggregate``); each worker also listens on a
  private unix socket for that. The pytest plugin's per-test API goes to every worker and reads
  from all of them the same way (``tests``).
- The supervisor forwards SIGTERM / SIGINT to the workers (each drains as a single gateway
  does), restarts a worker that dies (at most once per ``RESTART_GAP_S``), and exits when all
  have stopped.
- A worker never outlives its supervisor: it watches the pipe multiprocessing keeps to its
  parent (``parent_process().sentinel``: it reads end-of-file once the parent is gone, killed
  with -9 included) and then drains as on SIGTERM. Orphans would otherwise keep serving the
  port with nobody to stop or restart them.
- A busy port is refused: SO_REUSEPORT lets any process of the same user bind a port that
  listeners already hold, so a second ``--workers`` gateway would quietly share the first one's
  port. The supervisor first binds the address without SO_REUSEPORT (any listener there makes
  that fail, "Address already in use"), and holds a lock file for the port while it runs (two
  supervisors starting at once: the workers listen only seconds later).
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from fastmode.gateway.config import Config
from fastmode.gateway.workers.partition import partition

RESTART_GAP_S = 2.0


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound with SO_REUSEPORT (the workers' shared port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def refuse_busy(host: str, port: int) -> int | None:
    """``OSError`` (EADDRINUSE) if something listens on ``host:port``; else the descriptor of
    the port's lock file, locked until it is closed (or the process ends). Port 0: nothing to
    check (the kernel picks a free port)."""
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not busy
        probe.bind((host, port))  # no SO_REUSEPORT: fails while any socket listens there
    lock = Path(tempfile.gettempdir()) / f"fastmode-port-{host.replace(':', '_')}-{port}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OSError(98, "Address already in use (another fastmode --workers is starting "
                      "on it)") from None
    return fd


def watch_parent() -> None:
    """In a worker: drain and exit (SIGTERM to itself) once the supervisor is gone."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def wait() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="fastmode-parent-watch", daemon=True).start()


def _worker(config_json: str, index: int, sockets: list[str], host: str, port: int,
            log_level: str) -> None:
    """A worker process: the gateway on its partition, on the shared port and its own socket."""
    watch_parent()
    from fastmode.gateway.app import create_app
    from fastmode.gateway.testing.claims import Claims
    from fastmode.gateway.workers.aggregate import WorkerMetrics
    from fastmode.gateway.workers.server import serve
    from fastmode.gateway.workers.tests import WorkerTests

    config = Config.model_validate_json(config_json)
    app = create_app(config)
    # the pytest plugin's tests: uses counted once for every worker (gateway.workers.tests)
    app.state.gateway.tests.claims = Claims(Path(sockets[0]).parent / "tests.sqlite3")
    public = reuseport_socket(host, port)
    private = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sockets[index])
    private.bind(sockets[index])
    serve(WorkerMetrics(WorkerTests(app, sockets), sockets), config, [public, private],
          log_level, inner=app)


class Supervisor:
    def __init__(self, config: Config, workers: int, log_level: str = "warning") -> None:
        self.configs = partition(config, workers)
        self.config = config
        self.log_level = log_level
        self.ctx = multiprocessing.get_context("spawn")
        self.dir = Path(tempfile.mkdtemp(prefix="fastmode-workers-"))
        self.sockets = [str(self.dir / f"worker-{i}.sock") for i in range(workers)]
        self.procs: list[BaseProcess | None] = [None] * workers
        self.started: list[float] = [0.0] * workers
        self.stopping = False
        self.lock = refuse_busy(config.server.host, config.server.port)
        # reserve the port (and learn it when the config says 0) until the workers listen
        self.reserved = reuseport_socket(config.server.host, config.server.port)
        self.port = self.reserved.getsockname()[1]

    def _spawn(self, i: int) -> None:
        p = self.ctx.Process(
            target=_worker, name=f"fastmode-worker-{i}",
            args=(self.configs[i].model_dump_json(), i, self.sockets, self.config.server.host,
                  self.port, self.log_level))
        p.start()
        self.procs[i] = p
        self.started[i] = time.monotonic()

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True
        for p in self.procs:
            if p is not None and p.pid is not None and p.is_alive():
                os.kill(p.pid, signal.SIGTERM)

    def run(self) -> int:
        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for i in range(len(self.procs)):
                self._spawn(i)
            self.reserved.close()
            while True:
                alive = [p for p in self.procs if p is not None and p.is_alive()]
                if self.stopping and not alive:
                    return 0
                if not self.stopping:
                    for i, p in enumerate(self.procs):
                        if (p is not None and not p.is_alive()
                                and time.monotonic() - self.started[i] > RESTART_GAP_S):
                            print(f"fastmode: worker {i} exited ({p.exitcode}); restarting",
                                  flush=True)
                            self._spawn(i)
                time.sleep(0.2)
        finally:
            deadline = time.monotonic() + self.config.server.shutdown_grace_s + 10
            for p in self.procs:
                if p is not None:
                    p.join(max(0.1, deadline - time.monotonic()))
                    if p.is_alive():
                        p.kill()
                        p.join(5)
            for s, h in previous.items():
                signal.signal(s, h)
            shutil.rmtree(self.dir, ignore_errors=True)
            if self.lock is not None:
                os.close(self.lock)


def describe(configs: list[Config]) -> list[str]:
    """One line per worker: the replicas it owns."""
    return [f"  worker {i}: " + ", ".join(f"{n} x{d.replicas}" for n, d in c.deployments.items())
            for i, c in enumerate(configs)]
