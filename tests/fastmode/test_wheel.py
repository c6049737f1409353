"""The built wheel: only fastmode's own packages at the top, the entry points in place."""

from __future__ import annotations

import os
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
    assert top == {"fastmode"}
    assert "fastmode/cli/__init__.py" in names and "fastmode/__main__.py" in names
    for layer in ("gateway", "backends", "clients", "workload"):
        assert f"fastmode/{layer}/__init__.py" in names
    assert "fastmode/backends/data/hardware.toml" in names  # package data
    assert "fastmode/gateway/data/default.toml" in names


def test_the_wheel_declares_the_command(wheel: Path) -> None:
    zf = zipfile.ZipFile(wheel)
    (entry,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = zf.read(entry).decode()
    assert "fastmode = fastmode.cli:main" in text


USER_TEST = '''\
def test_agent(fastmode):
    fastmode.reply(match=r"weather in (\\w+)", tool_call={"name": "get_weather", "arguments": {"city": r"\\1"}})
    fastmode.fail("429", times=1)
    r = fastmode.openai(max_retries=1).chat.completions.create(model="frontier", messages=[{"role": "user", "content": "weather in Oslo?"}])
    assert r.choices[0].message.tool_calls[0].function.arguments == '{"city":"Oslo"}'
    assert [c.reply["tool_calls"][0]["arguments"] for c in fastmode.requests] == [{"city": "Oslo"}]


def test_other(fastmode):
    assert fastmode.requests == []
'''


def test_a_users_test_runs_on_the_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    """A fresh venv with the wheel installed (no download: the dependencies are this venv's,
    on its path by a .pth), a user's test file outside the repository, plain and on two
    workers."""
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    uv = Path(sys.executable).with_name("uv")
    subprocess.run([str(uv), "pip", "install", "-q", "--offline", "--no-deps", "--python",
                    str(py), str(wheel)], check=True, capture_output=True)
    work = tmp_path / "user"
    work.mkdir()
    (work / "test_user.py").write_text(USER_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FASTMODE_LEDGER")}
    where = subprocess.run([str(py), "-c", "import fastmode, fastmode.gateway as g;"
                            " print(fastmode.__file__, g.__file__)"], cwd=work, env=env, check=True,
                           capture_output=True, text=True).stdout
    assert where.count(site) == 2, where  # the wheel's copy, not the checkout's
    for extra in ([], ["-n", "2"]):
        run = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
                             cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert "2 passed" in run.stdout
