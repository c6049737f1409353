"""The built wheel: only fastmode's own packages at the top, the entry points in place."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    uv = Path(sys.executable).with_name("uv")
    subprocess.run([str(uv), "build", "--wheel", "--offline", "-q", "-o", str(out), str(ROOT)],
                   check=True, capture_output=True)
    (found,) = out.glob("fastmode-*.whl")
    return found


def test_the_wheel_installs_only_fastmodes_packages(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"fastmode", "gateway", "backends", "clients", "workload"}
    assert "fastmode/cli/__init__.py" in names and "fastmode/__main__.py" in names
    assert "backends/data/" in {n[:len("backends/data/")] for n in names}  # package data


def test_the_wheel_declares_the_command(wheel: Path) -> None:
    zf = zipfile.ZipFile(wheel)
    (entry,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = zf.read(entry).decode()
    assert "fastmode = fastmode.cli:main" in text
