"""The coding agents people run, run as they run them: Claude Code, Codex CLI, opencode and pi
from npm (tests/agents/package.json; `make agents`), each with its default model and settings
and again with its fast switch, against `fastmode serve` on the built-in config, inside a
network namespace with only loopback (clients.agent_cli). `make test-agents-latest` runs the
same tests on the CLIs' newest releases."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from fastmode.clients.agent_cli import README, Session, run_session

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("FASTMODE_AGENTS_BIN", ROOT / "tests" / "agents" / "node_modules"
                          / ".bin"))
SERVE = (str(Path(sys.executable).with_name("fastmode")), "serve")
READ = "read README.md and tell me its first line"
CHANGE = "change the first line of README.md to Hello fastmode"
FIRST = README.splitlines()[0]


def session(cli: str, task: str, **kw: object) -> Session:
    assert (BIN / cli).exists(), f"{cli} is not installed: run `make agents`"
    assert shutil.which("unshare"), "unshare (util-linux) is needed: run `make system-deps`"
    return run_session(cli, task, bin_dir=BIN, serve=SERVE, **kw)  # type: ignore[arg-type]


def finished(s: Session) -> None:
    detail = f"{s.cli}: exit {s.exit_code}\n{s.stdout[-2000:]}\n{s.stderr[-2000:]}"
    assert s.exit_code == 0, detail
    # 499: a call the CLI gave up on as it exited (opencode's title for the session)
    assert s.requests and all(r["status"] in (200, 499) for r in s.requests), detail


@pytest.mark.parametrize("cli", ["claude", "codex", "opencode", "pi"])
@pytest.mark.parametrize("fast", [False, True], ids=["default", "fast"])
def test_each_agent_reads_the_file_and_quotes_its_first_line(cli: str, fast: bool) -> None:
    s = session(cli, READ, fast=fast)
    finished(s)
    assert FIRST in s.answer, s.answer  # only the read tool's result holds it
    served = [r for r in s.requests if r["status"] == 200 and r["output_tokens"]]
    assert len(served) >= 2  # a tool call, then the answer
    assert s.files == {"README.md": README}  # nothing written
    assert s.tiers == (["fast"] if fast else ["standard"])


def test_codex_spark_is_served_by_the_spark_tier() -> None:
    s = session("codex", READ, model="gpt-5.3-codex-spark")
    finished(s)
    assert FIRST in s.answer and s.tiers == ["spark"]


@pytest.mark.parametrize("cli", ["claude", "codex", "opencode", "pi"])
def test_each_agent_applies_a_one_line_edit_to_the_named_file_only(cli: str) -> None:
    s = session(cli, CHANGE, edits=True)
    finished(s)
    assert s.files == {"README.md": README.replace(FIRST, "Hello fastmode")}, s.answer
