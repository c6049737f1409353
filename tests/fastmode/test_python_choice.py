"""``scripts/python.sh``: the Makefile's venv interpreter is the quickest CPython 3.11 found, and
a candidate that cannot make a venv, or is another version, is passed over."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def choose(path_dirs: list[Path]) -> str:
    path = os.pathsep.join([*map(str, path_dirs), os.environ.get("PATH", "")])
    done = subprocess.run(["bash", str(ROOT / "scripts/python.sh")], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PATH": path})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def fake_python(directory: Path, script: str) -> Path:
    directory.mkdir()
    exe = directory / "python3.11"
    exe.write_text(f"#!/bin/sh\n{script}\n")
    exe.chmod(0o755)
    return exe


def version_of(python: str) -> str:
    return subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"],
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()


def test_the_chosen_interpreter_is_a_python_3_11_that_can_make_a_venv() -> None:
    chosen = choose([])
    assert version_of(chosen) == "(3, 11)"
    subprocess.run([chosen, "-c", "import ensurepip, venv"], check=True, timeout=30)


def test_the_quickest_candidate_wins(tmp_path: Path) -> None:
    quick = fake_python(tmp_path / "quick", "echo 0.000001")  # its workload's best round
    slow = fake_python(tmp_path / "slow", "echo 99")
    assert choose([slow.parent, quick.parent]) == str(quick)
    assert choose([quick.parent, slow.parent]) == str(quick)


def test_a_candidate_that_fails_the_workload_is_passed_over(tmp_path: Path) -> None:
    # e.g. no ensurepip (Debian without python3-venv) or another version: the script exits 1
    broken = fake_python(tmp_path / "broken", "exit 1")
    chosen = choose([broken.parent])
    assert chosen != str(broken)
    assert version_of(chosen) == "(3, 11)"
