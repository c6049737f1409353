"""``fastmode.serve``: the gateway for a test or a script, started and stopped by a ``with``.

In process (the default) the gateway runs on its own thread with its own event loop, so the
caller's code (sync or asyncio) talks to it over loopback like to any server; ``process=True``
runs ``python -m fastmode serve`` as a child process instead (a crash or a blocking call in
the caller's process cannot stall its streams). Either way the port is picked by the OS when
the socket is bound (``port=0``: no race between parallel test processes), the usage ledger is
a scratch file removed at the end unless ``ledger`` names one, and the server stops when the
block ends, by an exception too.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

BANNER = re.compile(rb"OpenAI base_url:\s+(http://\S+?)/v1\s")
START_TIMEOUT_S = 60.0


class Server:
    """A running gateway: ``url`` (no ``/v1``), and SDK clients pointed at it."""

    def __init__(self, config: Any = None, time_scale: float = 1.0, port: int = 0, *,
                 host: str = "127.0.0.1", process: bool = False, ledger: str | None = None,
                 headers: dict[str, str] | None = None, admin_key: str | None = None) -> None:
        self.config = config
        self.time_scale = time_scale
        self.port = port
        self.host = host
        self.process = process
        self.ledger = ledger
        self.headers = dict(headers or {})  # sent by the clients this server hands out
        self.admin_key = admin_key  # the admin API on, with this key (the pytest plugin's)
        self.url = ""
        self._scratch: str | None = None
        self._thread: threading.Thread | None = None
        self._uvicorn: Any = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._error: BaseException | None = None

    # -- clients --------------------------------------------------------------------------

    def openai(self, **kwargs: Any) -> Any:
        """An ``openai.OpenAI`` client on this server (kwargs go to the client)."""
        import openai

        kwargs.setdefault("api_key", "fastmode")
        kwargs["default_headers"] = {**self.headers, **kwargs.get("default_headers", {})}
        return openai.OpenAI(base_url=self.url + "/v1", **kwargs)

    def anthropic(self, **kwargs: Any) -> Any:
        """An ``anthropic.Anthropic`` client on this server (kwargs go to the client)."""
        import anthropic

        kwargs.setdefault("api_key", "fastmode")
        kwargs["default_headers"] = {**self.headers, **kwargs.get("default_headers", {})}
        return anthropic.Anthropic(base_url=self.url, **kwargs)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Server:
        if self.ledger is None:
            self._scratch = tempfile.mkdtemp(prefix="fastmode-")
            self.ledger = str(Path(self._scratch) / "ledger.sqlite3")
        try:
            if self.process:
                self._start_process()
            else:
                self._start_thread()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _gateway_config(self) -> Any:
        from fastmode.gateway.config import Config, load_config

        config = self.config
        if not isinstance(config, Config):
            config = load_config(config)
        server = config.server.model_copy(update={"time_scale": self.time_scale,
                                                  "host": self.host, "port": self.port})
        state = config.state.model_copy(update={"path": self.ledger})
        update: dict[str, Any] = {"server": server, "state": state}
        if self.admin_key:
            update["admin"] = config.admin.model_copy(update={"enabled": True,
                                                              "key": self.admin_key})
        return config.model_copy(update=update)

    def _start_thread(self) -> None:
        import uvicorn

        from fastmode.gateway.app import create_app

        config = self._gateway_config()
        app = create_app(config)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.url = f"http://{self.host}:{sock.getsockname()[1]}"
        self._uvicorn = server = uvicorn.Server(uvicorn.Config(
            app, log_level="warning", access_log=False, loop="asyncio", lifespan="on",
            timeout_graceful_shutdown=5))

        def run() -> None:
            try:
                asyncio.run(server.serve(sockets=[sock]))
            except BaseException as exc:  # reported by start(), or lost at exit
                self._error = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=run, name="fastmode-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"fastmode server failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                raise RuntimeError("fastmode server did not start in time")
            time.sleep(0.01)

    def _start_process(self) -> None:
        cmd = [sys.executable, "-m", "fastmode", "serve", "--host", self.host,
               "--port", str(self.port), "--time-scale", repr(self.time_scale),
               "--ledger", str(self.ledger)]
        if self.config is not None:
            if not isinstance(self.config, str | Path):
                raise TypeError("process=True takes a config file's path")
            cmd += ["--config", str(self.config)]
        assert self._scratch is not None or self.ledger
        out = tempfile.TemporaryFile()
        err = tempfile.TemporaryFile()
        self._proc = proc = subprocess.Popen(cmd, stdout=out, stderr=err,
                                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err.seek(0)
                raise RuntimeError(f"fastmode serve exited: {err.read().decode()[-2000:]}")
            out.seek(0)
            found = BANNER.search(out.read())
            if found:
                url = found.group(1).decode()
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        self.url = url
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.05)
        raise RuntimeError("fastmode serve did not become healthy in time")

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> Server:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.to_thread(self.stop)


def serve(config: Any = None, time_scale: float = 1.0, port: int = 0, *,
          host: str = "127.0.0.1", process: bool = False, ledger: str | None = None) -> Server:
    """A gateway to use in a ``with`` (or ``async with``) block.

    ``config``: a TOML file's path laid over the built-in config (None: the built-in one), or
    a ``gateway.config.Config``; ``time_scale``: wall seconds per modeled second (0.01 streams
    100x faster, every reported time modeled); ``port``: 0 lets the OS pick; ``process``: run
    it as a child process instead of a thread; ``ledger``: keep the usage ledger in this file
    (default: a scratch file removed at the end)."""
    return Server(config, time_scale, port, host=host, process=process, ledger=ledger)
