"""A coding agent's turns, as the gateway pays for them: server CPU per turn of an agent session.

A coding agent sends its whole conversation again at every turn: the harness's instructions,
its tool definitions, every earlier message, call and output. This replays one request of each
agent as ``--sessions`` sessions of ``--turns`` turns, each resending the conversation so far
plus one more tool call and its output (~700 bytes), on ``fastmode serve`` (the built-in config,
the spark tier, so that a turn's modeled time is short), one session at a time, as one agent
works; the reply is the mock model's own (a tool call or the answer):

- ``codex``: a recorded Codex CLI request (``tests/data/codex_responses_request.json``, ~60 KB),
  over Responses SSE;
- ``claude``: Claude Code's second request of a session, recorded now (``fastmode serve
  --record``) from the installed CLI (``make agents``) in a loopback-only namespace (~80 KB,
  24 tool definitions), over Messages SSE.
 The server runs on one core, this client on the other; the table is
the server's CPU for a session's first turn and, per turn, for the later ones (median over the
sessions), beside each ``--root`` checkout's (a ``git worktree`` of the commit before a change):
before and after in one command.

Usage: python bench/agent_turns.py [--agents codex,claude] [--sessions N] [--turns N]
       [--root DIR ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.harness import ROOT, cores, free_port, pin_self, stop, wait_healthy
from fastmode.clients.agent_cli import run_session

RECORDED = ROOT / "tests/data/codex_responses_request.json"
BIN = ROOT / "tests" / "agents" / "node_modules" / ".bin"


@dataclass(frozen=True)
class Agent:
    path: str
    model: str
    headers: dict[str, str]

    def turns(self, base: dict[str, Any], n: int, session: int) -> list[bytes]:
        """The bodies of one session's ``n`` turns."""
        key = "input" if self.path == "/v1/responses" else "messages"
        items = list(base[key])
        out = []
        for k in range(n):
            body = {**base, "model": self.model, key: items, "stream": True}
            out.append(orjson.dumps({**body, "store": False} if key == "input" else body))
            items = [*items, *self.call(f"call_{session}_{k}", k)]
        return out

    def call(self, call_id: str, k: int) -> list[dict[str, Any]]:
        """One more tool call of the agent's and the tool's output."""
        listing = "".join(f"src/part{k}/file{j}.py\n" for j in range(30))
        if self.path == "/v1/responses":
            return [{"type": "function_call", "name": "exec", "call_id": call_id,
                     "arguments": orjson.dumps({"cmd": ["ls", f"src/part{k}"]}).decode()},
                    {"type": "function_call_output", "call_id": call_id, "output": listing}]
        return [{"role": "assistant", "content": [
                    {"type": "tool_use", "id": call_id, "name": "Bash",
                     "input": {"command": f"ls src/part{k}"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": call_id, "content": listing}]}]


AGENTS = {
    "codex": Agent("/v1/responses", "gpt-5.3-codex-spark", {"authorization": "Bearer sk-agent"}),
    # (Claude Code puts a system turn inside `messages` under this beta)
    "claude": Agent("/v1/messages", "frontier-spark", {
        "x-api-key": "sk-agent", "anthropic-version": "2023-06-01",
        "anthropic-beta": "mid-conversation-system-2026-04-07"}),
}


def recorded(agent: str) -> dict[str, Any]:
    """The request a turn grows from: Codex's from the file; Claude Code's recorded now."""
    if agent == "codex":
        return dict(orjson.loads(RECORDED.read_bytes()))
    if not (BIN / "claude").exists():
        raise SystemExit("Claude Code is not installed: run `make agents`")
    with tempfile.TemporaryDirectory() as tmp:
        session = run_session("claude", "read README.md and tell me its first line", bin_dir=BIN,
                              serve=(sys.executable, "-m", "fastmode", "serve", "--record", tmp))
        if session.exit_code != 0:
            raise SystemExit(f"Claude Code failed: {session.stderr[-500:]}")
        cassette = next(Path(tmp).glob("*.jsonl"))
        entries = [orjson.loads(line) for line in cassette.read_bytes().splitlines()]
    return dict(entries[-1]["request"])


def serve(root: Path, core: int | None, tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``fastmode serve`` of checkout ``root`` on the built-in config, pinned to ``core``."""
    port = free_port()

    def pin() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})

    proc = subprocess.Popen(
        [sys.executable, "-m", "fastmode", "serve", "--port", str(port), "--ledger",
         str(tmp / f"ledger-{port}.sqlite3")], cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root)), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, preexec_fn=pin)
    wait_healthy(port, proc)
    return proc, port


def on_cpu(pid: int) -> float:
    """Seconds the server's threads have run so far (schedstat: nanoseconds, where the clock
    ticks of ``/proc/PID/stat`` count in 10 ms, coarser than a turn)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def session_cpu(client: httpx.Client, pid: int, path: str,
                bodies: list[bytes]) -> tuple[float, float]:
    """(server CPU of the first turn, of each later one on average), in ms."""
    spent = []
    for body in bodies:
        before = on_cpu(pid)
        with client.stream("POST", path, content=body,
                           headers={"content-type": "application/json"}) as r:
            if r.status_code != 200:
                raise RuntimeError(f"turn answered {r.status_code}: {r.read()[:300]!r}")
            for _ in r.iter_raw():
                pass
        spent.append(on_cpu(pid) - before)
    return spent[0] * 1e3, sum(spent[1:]) / max(1, len(spent) - 1) * 1e3


def measure(root: Path, agent: Agent, base: dict[str, Any], args: argparse.Namespace,
            tmp: Path) -> tuple[float, float]:
    server_core = (cores() + [None])[0]
    proc, port = serve(root, server_core, tmp)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120,
                          headers=agent.headers) as client:
            session_cpu(client, proc.pid, agent.path, agent.turns(base, 2, 999))  # warm
            runs = [session_cpu(client, proc.pid, agent.path, agent.turns(base, args.turns, s))
                    for s in range(args.sessions)]
    finally:
        stop(proc)
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--agents", default="codex,claude", help="of: " + ", ".join(AGENTS))
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--root", action="append", type=Path, default=[],
                    help="another checkout to measure (before a change); repeatable")
    args = ap.parse_args()
    agents = [a for a in args.agents.split(",") if a]
    unknown = set(agents) - set(AGENTS)
    if unknown:
        ap.error(f"unknown agent(s): {', '.join(sorted(unknown))}")
    bases = {a: recorded(a) for a in agents}  # (before the client is pinned)
    cs = cores()
    pin_self(cs[1] if len(cs) > 1 else None)
    results = []
    with tempfile.TemporaryDirectory() as name:
        for agent in agents:
            for root in [*args.root, ROOT]:
                first, later = measure(root, AGENTS[agent], bases[agent], args, Path(name))
                results.append((agent, root, first, later))
    print(f"| agent | checkout | server CPU, first turn (ms) | per later turn (ms), "
          f"{args.turns} turns |")
    print("|---|---|---:|---:|")
    for agent, root, first, later in results:
        print(f"| {agent} | {root} | {first:.1f} | {later:.1f} |")


if __name__ == "__main__":
    main()
