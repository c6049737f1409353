"""Coding-agent CLIs against a fastmode server, as their users run them, with nothing leaving
the machine.

One session: a scratch folder with a README, ``fastmode serve`` on the built-in config, and one
CLI (Claude Code, Codex CLI, opencode or pi, from npm) given one task, all inside a network
namespace that has only loopback (``unshare --net``), so the CLIs' telemetry and update checks
reach nothing. What a session reports is what its user would see (exit code, wall time, the
final answer, the files afterwards) and what the server billed for it (its usage ledger).

Needs root (or user namespaces) for ``unshare``, and the CLIs installed with npm
(``tests/agents/package.json`` pins them; ``make agents`` installs them).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PORT = 8000  # inside the namespace: nothing else listens there
README = "Hello from the scratch README.\nSecond line.\n"


@dataclass(frozen=True)
class Session:
    cli: str
    model: str
    fast: bool
    exit_code: int
    wall_s: float
    answer: str  # the CLI's final text
    files: dict[str, str]  # the scratch folder's files afterwards
    requests: list[dict[str, object]] = field(default_factory=list)  # the server's ledger rows
    stdout: str = ""
    stderr: str = ""

    @property
    def tokens(self) -> tuple[int, int]:
        """(input, output) tokens the server billed for the session."""
        return (sum(int(str(r["input_tokens"])) for r in self.requests),
                sum(int(str(r["output_tokens"])) for r in self.requests))

    @property
    def cost_usd(self) -> float:
        return sum(float(str(r["cost_usd"])) for r in self.requests)

    @property
    def tiers(self) -> list[str]:
        return sorted({str(r["tier_served"]) for r in self.requests})


# one function per CLI: (its argv, its environment, files to write into HOME) for a task
Launch = tuple[list[str], dict[str, str], dict[str, str]]


def _claude(task: str, model: str | None, fast: bool, edits: bool) -> Launch:
    argv = ["claude", "-p", task, "--output-format", "stream-json", "--verbose"]
    argv += ["--model", model] if model else []
    argv += ["--settings", '{"fastMode": true}'] if fast else []
    argv += ["--permission-mode", "acceptEdits"] if edits else []
    env = {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{PORT}", "ANTHROPIC_API_KEY": "x",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1"}
    return argv, env, {}


def _codex(task: str, model: str | None, fast: bool, edits: bool) -> Launch:
    config = "\n".join([
        'model_provider = "fastmode"', "check_for_update_on_startup = false",
        *([f'model = "{model}"'] if model else []),
        *(['service_tier = "priority"'] if fast else []),
        "[analytics]", "enabled = false", "[feedback]", "enabled = false",
        "[otel]", 'exporter = "none"', "[model_providers.fastmode]", 'name = "fastmode"',
        f'base_url = "http://127.0.0.1:{PORT}/v1"', 'env_key = "FASTMODE_KEY"',
        'wire_api = "responses"', "supports_websockets = true", ""])
    argv = ["codex", "exec", "--skip-git-repo-check", "--json"]
    argv += ["--sandbox", "workspace-write"] if edits else []
    return [*argv, task], {"FASTMODE_KEY": "x", "CODEX_HOME": "{HOME}/.codex"}, \
        {".codex/config.toml": config}


def _opencode(task: str, model: str | None, fast: bool, edits: bool) -> Launch:
    base = f"http://127.0.0.1:{PORT}/v1"
    options = {"speed": "fast"} if fast else {}
    config = {"autoupdate": False, "share": "disabled", "provider": {"fastmode": {
        "npm": "@ai-sdk/anthropic", "name": "fastmode",
        "options": {"baseURL": base, "apiKey": "x"},
        "models": {"session": {"id": model or "claude-opus-4-8", "options": options}}}}}
    return (["opencode", "run", "--format", "json", "-m", "fastmode/session", task],
            {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1"},
            {".config/opencode/opencode.json": json.dumps(config)})


def _pi(task: str, model: str | None, fast: bool, edits: bool) -> Launch:
    models = {"providers": {"fastmode": {
        "baseUrl": f"http://127.0.0.1:{PORT}/{'fast/' if fast else ''}v1",
        "api": "openai-completions", "apiKey": "x", "models": [{"id": model or "frontier"}]}}}
    return (["pi", "--no-session", "--mode", "json", "--model",
             f"fastmode/{model or 'frontier'}", "-p", task],
            {"PI_OFFLINE": "1", "PI_TELEMETRY": "0"},
            {".pi/agent/models.json": json.dumps(models)})


CLIS: dict[str, Callable[[str, str | None, bool, bool], Launch]] = {
    "claude": _claude, "codex": _codex, "opencode": _opencode, "pi": _pi,
}
DEFAULT_MODELS = {"claude": "claude-opus-4-8", "codex": "gpt-6.2-sol",
                  "opencode": "claude-opus-4-8", "pi": "frontier"}


def run_session(cli: str, task: str, *, bin_dir: Path, model: str | None = None,
                fast: bool = False, edits: bool = False, timeout_s: float = 180,
                serve: Sequence[str] = ("fastmode", "serve"), readme: str = README) -> Session:
    """One session of ``cli`` on ``task`` in a fresh scratch folder holding ``README.md``."""
    if shutil.which("unshare") is None:
        raise RuntimeError("agent sessions need unshare (util-linux) for a loopback-only "
                           "network namespace")
    argv, env, home_files = CLIS[cli](task, model, fast, edits)
    with tempfile.TemporaryDirectory(prefix=f"fastmode-{cli}-") as tmp:
        root = Path(tmp)
        work, home = root / "work", root / "home"
        work.mkdir()
        (work / "README.md").write_text(readme)
        for rel, text in home_files.items():
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(text)
        env = {k: v.replace("{HOME}", str(home)) for k, v in env.items()}
        ledger = root / "ledger.sqlite3"
        server = [*serve, "--port", str(PORT), "--ledger", str(ledger)]
        script = "\n".join([
            "ip link set lo up",
            f"{shlex.join(server)} > {shlex.quote(str(root / 'server.log'))} 2>&1 &",
            f"for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{PORT}) 2>/dev/null "
            "&& break; sleep 0.1; done",
            f"cd {shlex.quote(str(work))}",
            f"start=$(date +%s%N); {shlex.join(argv)} < /dev/null; code=$?",
            'echo "__session $code $(( ($(date +%s%N) - start) / 1000000 ))" >&2',
            "kill %1; wait", ""])
        full_env = {**os.environ, **env, "HOME": str(home),
                    "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        proc = subprocess.run(["unshare", "--net", "--fork", "bash", "-c", script],
                              capture_output=True, text=True, env=full_env,
                              timeout=timeout_s)
        code, wall = _session_line(proc.stderr)
        files = {p.name: p.read_text(errors="replace") for p in work.iterdir() if p.is_file()}
        return Session(cli, model or DEFAULT_MODELS[cli], fast, code, wall,
                       final_answer(cli, proc.stdout), files, _ledger(ledger), proc.stdout,
                       proc.stderr)


def _session_line(stderr: str) -> tuple[int, float]:
    for line in reversed(stderr.splitlines()):
        if line.startswith("__session "):
            _, code, ms = line.split()
            return int(code), int(ms) / 1000
    return -1, float("nan")


def _ledger(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    deadline = time.monotonic() + 2  # the server flushes its rows on the way out
    while True:
        try:
            with sqlite3.connect(path) as db:
                db.row_factory = sqlite3.Row
                return [dict(r) for r in db.execute("SELECT * FROM usage ORDER BY id")]
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                return []
            time.sleep(0.1)


def final_answer(cli: str, stdout: str) -> str:
    """The last text the CLI printed as its answer (each CLI's JSON event stream)."""
    answer = ""
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if cli == "claude" and event.get("type") == "result":
            answer = str(event.get("result") or "")
        elif cli == "codex" and event.get("type") == "item.completed":
            item = event.get("item") or {}
            if item.get("type") == "agent_message":
                answer = str(item.get("text") or "")
        elif cli == "opencode" and event.get("type") == "text":
            answer = str((event.get("part") or {}).get("text") or "")
        elif cli == "pi" and event.get("type") in ("agent_end", "message_end"):
            answer = _pi_text(event) or answer
    return answer


def _pi_text(event: dict[str, object]) -> str:
    messages = event.get("messages") or [event.get("message")]
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            parts = message.get("content") or []
            return "".join(str(p.get("text", "")) for p in parts
                           if isinstance(p, dict) and p.get("type") == "text")
    return ""
