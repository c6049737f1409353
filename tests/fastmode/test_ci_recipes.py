"""The CI recipes: action.yml's start step runs as written; the README's snippets' commands
parse with the real command line."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import yaml
from conftest import free_port

from fastmode.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_the_actions_start_step_serves_and_waits_for_health(tmp_path: Path) -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    install, start = action["runs"]["steps"]
    assert "pip install" in install["run"]
    port = free_port()
    script = (start["run"].replace("${{ inputs.port }}", str(port))
              .replace("${{ inputs.time-scale }}", "0.01").replace("${{ inputs.config }}", ""))
    # on the PATH as after the install step: this venv's `fastmode`
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "RUNNER_TEMP": str(tmp_path), "PATH": path}
    done = subprocess.run(["bash", "-c", script], env=env, timeout=60, capture_output=True)
    pid = int((tmp_path / "fastmode.pid").read_text())
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        assert (tmp_path / "fastmode-ledger.sqlite3").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):  # (it failed: said above)
            os.kill(pid, signal.SIGTERM)


def test_the_readmes_recipes_use_real_flags() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use it in your tests", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"\(fastmode (serve[^&)]*)&\)", section)
    commands += [" ".join(a for a in shlex.split(m.replace(",", " ")) if a != "fastmode")
                 for m in re.findall(r'command: \[([^\]]*)\]', section)]
    assert len(commands) == 2, commands
    parser = build_parser()
    for command in commands:
        args = parser.parse_args(shlex.split(command))
        assert args.command == "serve" and args.time_scale == 0.01
