"""Run docker-compose.yml's topology without Docker, and its integration suite against it.

    python scripts/integration.py [--keep] [--timeout S] [-- PYTEST_ARGS...]

Reads docker-compose.yml and starts every service whose command is ``fastmode ...`` as a local
process on a free loopback port: the same commands, the same config file (the service's volume
mount, mapped back to the repository), the container's ``--host 0.0.0.0 --port 8000`` replaced
by ``127.0.0.1`` and the free port; the ``redis`` service (the official image) runs as a local
``redis-server`` with its arguments, on a free port, without persistence. Service names in URLs
become those loopback URLs: the gateways' config gets them through
``FASTMODE_UPSTREAM_<SERVICE>`` (deploy/gateway-remote.toml reads
``${FASTMODE_UPSTREAM_ENGINE_FAST:-http://engine-fast:8000}`` and so on), the services' and the
test service's ``environment`` by substitution (``redis://redis:6379`` and
``http://gateway-1:8000`` -> the local addresses). Then it runs
the ``integration-tests`` service's command (pytest) with ``FASTMODE_TOPOLOGY_FILE`` naming a JSON
file of the processes (URL, pid, argv), which the suite uses to kill and restart engines.

Every wait is bounded; at the end every process the run started (and any engine the suite
restarted, recorded in the topology file) is stopped by its pid: SIGTERM, then SIGKILL after
10 s. Exit status: pytest's, or 2 if the topology did not come up.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import httpx
import yaml

from bench.harness import free_port  # the benchmarks' port reservation, one copy

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
TEST_SERVICE = "integration-tests"
CONTAINER_PORT = "8000"


def env_name(service: str) -> str:
    """``engine-standard-1`` -> ``FASTMODE_UPSTREAM_ENGINE_STANDARD_1``."""
    return "FASTMODE_UPSTREAM_" + service.upper().replace("-", "_")


@dataclass
class Service:
    name: str
    argv: list[str]
    env: dict[str, str]
    url: str
    depends_on: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None


def _mounts(svc: dict[str, Any]) -> dict[str, Path]:
    """Container path -> repository path, from the service's bind mounts."""
    out = {}
    for vol in svc.get("volumes") or []:
        if isinstance(vol, str):
            parts = vol.split(":")
            src, dst = parts[0], parts[1]
        else:
            src, dst = vol["source"], vol["target"]
        out[dst] = (ROOT / src).resolve()
    return out


def _command(svc: dict[str, Any]) -> list[str]:
    cmd = svc.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def _environment(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _scheme(svc: dict[str, Any]) -> str:
    return "redis" if _command(svc)[:1] == ["redis-server"] else "http"


def _listen(svc: dict[str, Any]) -> str:
    cmd = _command(svc)
    return cmd[cmd.index("--port") + 1] if "--port" in cmd[:-1] else CONTAINER_PORT


def _depends(svc: dict[str, Any]) -> list[str]:
    dep = svc.get("depends_on") or []
    return list(dep) if isinstance(dep, (list, dict)) else []


def plan(compose: dict[str, Any]) -> tuple[list[Service], list[str], dict[str, str]]:
    """The local processes for the ``fastmode`` services (in dependency order), the test
    command, and the test environment."""
    services = compose["services"]
    ports = {name: free_port() for name in services if name != TEST_SERVICE}
    urls = {name: f"{_scheme(services[name])}://127.0.0.1:{p}" for name, p in ports.items()}
    upstream_env = {env_name(n): u for n, u in urls.items()}

    def local(value: str) -> str:
        for n, p in ports.items():
            value = value.replace(f"://{n}:{_listen(services[n])}", f"://127.0.0.1:{p}")
        return value

    out: list[Service] = []
    for name, svc in services.items():
        if name == TEST_SERVICE:
            continue
        cmd = _command(svc)
        if cmd[:1] == ["redis-server"]:  # the official image's server, as a local process
            redis = shutil.which("redis-server")
            if redis is None:
                raise SystemExit(f"{name}: redis-server is not installed "
                                 "(apt-get install redis-server)")
            argv = [redis, *cmd[1:], "--bind", "127.0.0.1", "--save", "", "--appendonly",
                    "no"]
            argv[argv.index("--port") + 1] = str(ports[name])
            out.append(Service(name, argv, {}, urls[name], _depends(svc)))
            continue
        if not cmd or cmd[0] != "fastmode":
            raise SystemExit(f"{COMPOSE.name}: service {name}: command must be `fastmode ...` "
                             "or `redis-server ...`")
        mounts = _mounts(svc)
        argv = [sys.executable, "-m", "fastmode", *cmd[1:]]
        port = str(ports[name])
        for i, arg in enumerate(argv[:-1]):
            nxt = argv[i + 1]
            if arg == "--host":
                argv[i + 1] = "127.0.0.1"
            elif arg == "--port":
                argv[i + 1] = port
            elif arg == "--config":
                if nxt not in mounts:
                    raise SystemExit(f"{name}: --config {nxt} is not a mounted file")
                argv[i + 1] = str(mounts[nxt])
        env = {k: local(v) for k, v in _environment(svc).items()}
        env.update(upstream_env)
        out.append(Service(name, argv, env, urls[name], _depends(svc)))
    # dependencies first
    ordered: list[Service] = []
    by_name = {s.name: s for s in out}

    def visit(s: Service, seen: tuple[str, ...] = ()) -> None:
        if s in ordered:
            return
        if s.name in seen:
            raise SystemExit(f"dependency cycle at {s.name}")
        for d in s.depends_on:
            if d in by_name:
                visit(by_name[d], (*seen, s.name))
        ordered.append(s)

    for s in out:
        visit(s)
    test = services[TEST_SERVICE]
    test_cmd = _command(test)
    if not test_cmd or test_cmd[0] != "pytest":
        raise SystemExit(f"{TEST_SERVICE}: command must be `pytest ...`")
    test_env = {k: local(v) for k, v in _environment(test).items()}
    return ordered, [sys.executable, "-m", *test_cmd], test_env


def _redis_ping(url: str) -> bool:
    host, port = url.split("://", 1)[1].split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if url.startswith("redis://"):
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"exited with status {proc.returncode}")
            if _redis_ping(url):
                return
            time.sleep(0.05)
            continue
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited with status {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"not healthy after {timeout:.0f} s")


def write_state(path: Path, services: list[Service]) -> None:
    state = {
        "services": {
            s.name: {"url": s.url, "pid": s.proc.pid if s.proc else None, "argv": s.argv,
                     "env": s.env, "cwd": str(ROOT), "log": str(s.log)}
            for s in services
        }
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(path)


def _is_ours(pid: int, argv: list[str]) -> bool:
    """The pid still runs the command we started (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return [c.decode() for c in cmdline if c] == argv


def stop_all(services: list[Service], state_file: Path | None) -> None:
    """SIGTERM every process of the run by pid (including engines the suite restarted), then
    SIGKILL what is left after 10 s."""
    pids: dict[int, list[str]] = {}
    for s in services:
        if s.proc is not None and s.proc.poll() is None:
            pids[s.proc.pid] = s.argv
    if state_file is not None and state_file.exists():
        try:
            state = json.loads(state_file.read_text())
            for entry in state["services"].values():
                if entry.get("pid"):
                    pids[int(entry["pid"])] = entry["argv"]
        except (OSError, ValueError, KeyError):
            pass
    running = {s.proc.pid for s in services if s.proc is not None and s.proc.poll() is None}
    # our own children are ours whatever their cmdline says (redis-server rewrites its title)
    live = [pid for pid, argv in pids.items() if pid in running or _is_ours(pid, argv)]
    for pid in live:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    children = {s.proc.pid: s.proc for s in services if s.proc is not None}
    while time.monotonic() < deadline:
        for p in children.values():
            p.poll()
        live = [pid for pid in live if (pid in children or _is_ours(pid, pids[pid]))
                and not _zombie(pid)]
        if not live:
            break
        time.sleep(0.1)
    for pid in live:
        os.kill(pid, signal.SIGKILL)
    for p in children.values():
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def tail(path: Path | None, n: int = 25) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compose", default=str(COMPOSE), help="compose file (default: the repo's)")
    ap.add_argument("--timeout", type=float, default=600, help="bound on the suite, seconds")
    ap.add_argument("--startup-timeout", type=float, default=60, help="bound per service, s")
    ap.add_argument("--keep", action="store_true",
                    help="leave the topology running after the suite (prints how to stop it)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)

    compose = yaml.safe_load(Path(args.compose).read_text())
    services, test_cmd, test_env = plan(compose)
    workdir = Path(tempfile.mkdtemp(prefix="fastmode-topology-"))
    state_file = workdir / "topology.json"
    stopped = False

    def on_signal(signum: int, frame: FrameType | None) -> NoReturn:  # pragma: no cover
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    status = 2
    try:
        for s in services:
            s.log = workdir / f"{s.name}.log"
            with open(s.log, "wb") as log:
                s.proc = subprocess.Popen(
                    s.argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                    env={**os.environ, **s.env, "PYTHONUNBUFFERED": "1"},
                    start_new_session=True,
                )
            write_state(state_file, services)
            try:
                wait_healthy(s.url, s.proc, args.startup_timeout)
            except RuntimeError as exc:
                print(f"integration: {s.name} {exc}\n{tail(s.log)}", file=sys.stderr)
                return 2
            print(f"integration: {s.name:<18} {s.url}  pid {s.proc.pid}", flush=True)
        env = {**os.environ, **test_env, "FASTMODE_TOPOLOGY_FILE": str(state_file),
               "PYTHONUNBUFFERED": "1"}
        # here engines are local processes, so the process-control tests run too: an empty -m
        # (given after the compose file's) lifts its "not process_control" filter
        cmd = [*test_cmd, "-m", "", *args.pytest_args]
        print(f"integration: {' '.join(cmd[2:])}  (gateway {env.get('FASTMODE_GATEWAY_URL')})",
              flush=True)
        try:
            status = subprocess.run(cmd, cwd=ROOT, env=env, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"integration: the suite did not finish in {args.timeout:.0f} s",
                  file=sys.stderr)
            status = 1
        if status != 0:
            for s in services:
                print(f"--- {s.name} log (tail) ---\n{tail(s.log)}", file=sys.stderr)
        if args.keep:
            stopped = True
            pids = " ".join(str(s.proc.pid) for s in services if s.proc)
            print(f"integration: left running ({state_file}); stop with: kill {pids}")
        return status
    except KeyboardInterrupt:
        return 130
    finally:
        if not stopped:
            stop_all(services, state_file)
            if status == 0:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                print(f"integration: logs kept in {workdir}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
