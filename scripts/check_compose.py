"""Check docker-compose.yml and the Dockerfile without a Docker engine.

    python scripts/check_compose.py [--require-parser]

1. ``docker-compose config -q`` (Debian's docker-compose package) or ``docker compose config
   -q`` when either is installed; with ``--require-parser`` a missing parser is an error.
2. Every command the compose file and the Dockerfile run exists in the project:
   ``fastmode SUB ...`` parses with the real ``fastmode`` argument parser (and the package
   declares the ``fastmode`` script); ``--config`` is a file mounted into that service and
   loads; ``--deployment`` names a deployment of it; ``pytest PATH...`` paths exist and are
   copied into the image stage that runs them, which installs pytest; ``python -c CODE``
   health checks compile.
3. References hold: build targets are stages of the Dockerfile, mounted files exist, COPY
   sources exist and are not excluded by .dockerignore, depends_on names services, and every
   upstream URL of the mounted gateway config (its ``${VAR:-default}`` defaults) names a compose
   service on the port that service listens on; URLs in service environments too.

Exit status 0 when all hold; otherwise each problem is printed and the status is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import io
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from fastmode.cli import build_parser
from fastmode.gateway.config import ConfigError, load_config
from fastmode.gateway.engine_config import engine_config

ROOT = Path(__file__).resolve().parent.parent

PROBLEMS: list[str] = []


def problem(msg: str) -> None:
    PROBLEMS.append(msg)


# -- the Dockerfile -----------------------------------------------------------------------------


class Stage:
    def __init__(self, name: str, base: str) -> None:
        self.name = name
        self.base = base
        self.copies: list[str] = []  # destinations (relative to WORKDIR /app for tests)
        self.sources: list[str] = []
        self.runs: list[str] = []
        self.cmd: list[str] = []


def parse_dockerfile(path: Path) -> dict[str, Stage]:
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    text = re.sub(r"\\\n", " ", path.read_text())
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else str(len(stages))
            current = stages[name] = Stage(name, parts[0])
        elif current is None:
            continue
        elif word == "COPY":
            args = shlex.split(rest)
            if any(a.startswith("--from") for a in args):
                continue
            args = [a for a in args if not a.startswith("--")]
            current.sources += args[:-1]
            current.copies += args[:-1]
        elif word == "RUN":
            current.runs.append(rest)
        elif word == "CMD":
            current.cmd = yaml.safe_load(rest) if rest.startswith("[") else shlex.split(rest)
    return stages


def lineage(stages: dict[str, Stage], name: str) -> list[Stage]:
    out = []
    while name in stages:
        out.append(stages[name])
        name = stages[name].base
    return out


def dockerignored(rel: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    ignored = False
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.rstrip("/")
        if p.startswith("**/"):
            hit = any(fnmatch.fnmatch(c.split("/")[-1], p[3:]) for c in candidates)
        else:
            hit = any(fnmatch.fnmatch(c, p) for c in candidates)
        if hit:
            ignored = not neg
    return ignored


# -- commands -------------------------------------------------------------------------------------


def check_fastmode(where: str, cmd: list[str], mounts: dict[str, Path], stages: list[Stage]
                   ) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    if "fastmode" not in pyproject["project"].get("scripts", {}):
        problem(f"{where}: the package declares no `fastmode` script")
    if not any("pip install" in r for s in stages for r in s.runs):
        problem(f"{where}: its image stage never pip-installs the package")
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = build_parser().parse_args(cmd[1:])
    except SystemExit:
        problem(f"{where}: `{' '.join(cmd)}` is not a valid fastmode command")
        return
    config_path = getattr(args, "config", None)
    config = None
    if config_path:
        if config_path not in mounts:
            problem(f"{where}: --config {config_path} is not mounted into the service")
        elif not mounts[config_path].is_file():
            problem(f"{where}: --config {config_path}: {mounts[config_path]} does not exist")
        else:
            try:
                config = load_config(mounts[config_path])
            except ConfigError as exc:
                problem(f"{where}: {exc}")
    deployment = getattr(args, "deployment", None)
    if deployment and config is not None:
        try:
            engine_config(config, deployment, getattr(args, "replicas", None))
        except ConfigError as exc:
            problem(f"{where}: {exc}")


def check_pytest(where: str, cmd: list[str], stages: list[Stage]) -> None:
    if not any("pytest" in r for s in stages for r in s.runs):
        problem(f"{where}: its image stage does not install pytest")
    copied = [c.rstrip("/") for s in stages for c in s.copies]
    skip_next = False
    for arg in cmd[1:]:
        if skip_next:
            skip_next = False
            continue
        if arg in ("-p", "-k", "-m", "-c", "--rootdir"):
            skip_next = True
            continue
        if arg.startswith("-"):
            continue
        path = arg.split("::")[0]
        if not (ROOT / path).exists():
            problem(f"{where}: pytest path {path} does not exist")
        elif not any(path == c or path.startswith(c + "/") for c in copied):
            problem(f"{where}: pytest path {path} is not copied into the image")


def check_command(where: str, cmd: list[str], mounts: dict[str, Path], stages: list[Stage]
                  ) -> None:
    if not cmd:
        problem(f"{where}: no command")
    elif cmd[0] == "fastmode":
        check_fastmode(where, cmd, mounts, stages)
    elif cmd[0] == "pytest":
        check_pytest(where, cmd, stages)
    elif cmd[:2] == ["python", "-c"]:
        try:
            compile(cmd[2], where, "exec")
        except SyntaxError as exc:
            problem(f"{where}: python -c does not compile: {exc}")
    else:
        problem(f"{where}: unknown command {cmd[0]!r}")


# The one kind of service not built from this project: Redis, for the state the gateway replicas
# share. scripts/integration.py runs it as a local `redis-server` with the same arguments.
PULLED_IMAGES = ("redis:",)


def check_pulled(where: str, svc: dict[str, Any]) -> int:
    """A Redis service: its command is redis-server (which the integration runner can run
    locally) with an explicit --port, and its health check is redis-cli ping."""
    cmd = svc.get("command") or []
    cmd = shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]
    if not cmd or cmd[0] != "redis-server" or "--port" not in cmd[:-1]:
        problem(f"{where}: a redis image must run `redis-server --port P ...`")
    test = (svc.get("healthcheck") or {}).get("test") or []
    if test[1:] != ["redis-cli", "ping"] and test[1:] != ["redis-cli", "-p", listen_port(svc)
                                                          or "6379", "ping"]:
        problem(f"{where}: health check must be `redis-cli ping`")
    return 2


def listen_port(svc: dict[str, Any]) -> str | None:
    cmd = svc.get("command") or []
    cmd = shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]
    return cmd[cmd.index("--port") + 1] if "--port" in cmd[:-1] else None


def check_url(where: str, url: str, services: dict[str, Any]) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname, str(parts.port or 80)
    if host in ("127.0.0.1", "localhost"):
        return
    if host not in services:
        problem(f"{where}: {url} names no compose service")
    elif listen_port(services[host]) != port:
        problem(f"{where}: {url}: service {host} listens on {listen_port(services[host])}")


# -- main -------------------------------------------------------------------------------------


def run_parser(compose: Path, require: bool) -> None:
    for cmd in (["docker-compose"], ["docker", "compose"]):
        if shutil.which(cmd[0]) is None:
            continue
        probe = subprocess.run([*cmd, "version"], capture_output=True, timeout=60)
        if probe.returncode != 0:
            continue
        r = subprocess.run([*cmd, "-f", str(compose), "config", "-q"], capture_output=True,
                           text=True, timeout=60, cwd=compose.parent)
        if r.returncode != 0:
            problem(f"{' '.join(cmd)} config -q: {r.stderr.strip() or r.stdout.strip()}")
        else:
            print(f"check_compose: `{' '.join(cmd)} config -q` accepts {compose.name}")
        return
    msg = "no compose parser installed (apt-get install docker-compose)"
    if require:
        problem(msg)
    else:
        print(f"check_compose: {msg}; structural checks only")


def check_dockerfile(dockerfile: Path, stages: dict[str, Stage], context: Path,
                     ignore: list[str]) -> int:
    """Every COPY source of every stage exists and is not excluded by .dockerignore; every
    stage's CMD runs. Returns how many commands were checked."""
    commands = 0
    for stage in stages.values():
        for src in stage.sources:
            hits: list[Path | None] = [*context.glob(src)]
            for hit in (hits or ([] if "*" in src else [None])):
                if hit is None:
                    problem(f"{dockerfile.name}: COPY {src}: no such file")
                elif dockerignored(str(hit.relative_to(context)), ignore):
                    problem(f"{dockerfile.name}: COPY {src}: excluded by .dockerignore")
        if stage.cmd:
            commands += 1
            check_command(f"{dockerfile.name} stage {stage.name} CMD", stage.cmd, {},
                          lineage(stages, stage.name))
    return commands


def service_mounts(where: str, svc: dict[str, Any], compose_path: Path) -> dict[str, Path]:
    """A service's volumes, as {path in the container: path on the host}; a missing source is
    a problem."""
    mounts: dict[str, Path] = {}
    for vol in svc.get("volumes") or []:
        src, dst = (vol.split(":")[:2] if isinstance(vol, str)
                    else (vol["source"], vol["target"]))
        path = (compose_path.parent / src).resolve()
        if not path.exists():
            problem(f"{where}: volume source {src} does not exist")
        mounts[dst] = path
    return mounts


def check_service_commands(where: str, svc: dict[str, Any], default: list[str],
                           mounts: dict[str, Path], chain: list[Stage]) -> int:
    """The service's command (or its image's CMD) and its healthcheck run. Returns how many
    commands were checked."""
    cmd = svc.get("command")
    cmd = shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd or []]
    check_command(f"{where}.command", cmd or default, mounts, chain)
    test = (svc.get("healthcheck") or {}).get("test")
    if isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"):
        check_command(f"{where}.healthcheck", test[1:] if test[0] == "CMD"
                      else shlex.split(test[1]), mounts, chain)
        return 2
    return 1


def check_links(where: str, svc: dict[str, Any], services: dict[str, Any],
                mounts: dict[str, Path]) -> None:
    """What the service names of the others (depends_on, URLs in its environment and in the
    remote tiers of a mounted TOML) exists."""
    for dep in svc.get("depends_on") or []:
        if dep not in services:
            problem(f"{where}.depends_on: no service {dep!r}")
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    for key, value in env.items():
        for url in re.findall(r"(?:https?|redis)://[^\s\"',]+", str(value)):
            check_url(f"{where}.environment.{key}", url, services)
    for dst, path in mounts.items():
        if path.suffix == ".toml" and path.is_file():
            raw = tomllib.loads(path.read_text())
            for tier, tcfg in (raw.get("remote", {}).get("tiers", {})).items():
                for url in tcfg.get("upstreams", []):
                    m = re.fullmatch(r"\$\{[A-Za-z0-9_]+:-(.*)\}", url)
                    check_url(f"{where}: {dst} remote.tiers.{tier}",
                              m.group(1) if m else url, services)


def check_service(name: str, svc: dict[str, Any], services: dict[str, Any], compose_path: Path,
                  ignore: list[str], checked_files: set[Path]) -> int:
    """One service: its build (Dockerfile, target, files), commands and links. Returns how
    many commands were checked."""
    where = f"services.{name}"
    build = svc.get("build")
    if not build and str(svc.get("image", "")).startswith(PULLED_IMAGES):
        return check_pulled(where, svc)
    if not build:
        problem(f"{where}: no build section (the image would be pulled)")
        return 0
    build = {"context": build} if isinstance(build, str) else build
    context = (compose_path.parent / build.get("context", ".")).resolve()
    dockerfile = context / build.get("dockerfile", "Dockerfile")
    if not dockerfile.is_file():
        problem(f"{where}: {dockerfile} does not exist")
        return 0
    stages = parse_dockerfile(dockerfile)
    target = build.get("target") or list(stages)[-1]
    if target not in stages:
        problem(f"{where}: build target {target!r} is not a stage of {dockerfile.name}")
        return 0
    chain = lineage(stages, target)
    commands = 0
    if dockerfile not in checked_files:
        checked_files.add(dockerfile)
        commands += check_dockerfile(dockerfile, stages, context, ignore)
    mounts = service_mounts(where, svc, compose_path)
    commands += check_service_commands(where, svc, stages[target].cmd, mounts, chain)
    check_links(where, svc, services, mounts)
    return commands


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compose", default=str(ROOT / "docker-compose.yml"))
    ap.add_argument("--require-parser", action="store_true",
                    help="fail when neither docker-compose nor `docker compose` is installed")
    args = ap.parse_args(argv)
    compose_path = Path(args.compose)
    run_parser(compose_path, args.require_parser)
    compose = yaml.safe_load(compose_path.read_text())
    services: dict[str, Any] = compose.get("services") or {}
    ignore_file = ROOT / ".dockerignore"
    ignore = [ln.strip() for ln in ignore_file.read_text().splitlines()
              if ln.strip() and not ln.startswith("#")] if ignore_file.exists() else []
    checked_files: set[Path] = set()
    commands = 0
    for name, svc in services.items():
        commands += check_service(name, svc, services, compose_path, ignore, checked_files)
    if "integration-tests" not in services:
        problem("services: no integration-tests service")
    for p in PROBLEMS:
        print(f"check_compose: {p}", file=sys.stderr)
    if PROBLEMS:
        return 1
    print(f"check_compose: {len(services)} services, {commands} commands: all exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
