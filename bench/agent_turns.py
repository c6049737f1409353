"""A coding agent's turns, as the gateway pays for them: server CPU per turn of a Codex session.

A coding agent sends its whole conversation again at every turn: the harness's instructions,
its tool definitions, every earlier message, call and output. This replays a recorded Codex
CLI request (``tests/data/codex_responses_request.json``, ~60 KB) as ``--sessions`` sessions of
``--turns`` turns: each turn resends the conversation so far plus one more tool call and its
output (~700 bytes), over Responses SSE on ``fastmode serve`` (the built-in config, the spark
tier, so that a turn's modeled time is short), one session at a time, as one agent works; the
reply is the mock model's own (a tool call or the answer, as Codex sends no output cap). The server runs on one core, this client on the other; the table is
the server's CPU for a session's first turn and, per turn, for the later ones (median over the
sessions), beside each ``--root`` checkout's (a ``git worktree`` of the commit before a change):
before and after in one command.

Usage: python bench/agent_turns.py [--sessions N] [--turns N] [--root DIR ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.harness import ROOT, cores, free_port, pin_self, stop, wait_healthy

RECORDED = ROOT / "tests/data/codex_responses_request.json"
MODEL = "gpt-5.3-codex-spark"


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


def turns(base: dict[str, Any], n: int, session: int) -> list[bytes]:
    """The bodies of one session's ``n`` turns."""
    items = list(base["input"])
    out = []
    for k in range(n):
        out.append(orjson.dumps({**base, "model": MODEL, "input": items, "stream": True,
                                 "store": False}))
        call = f"call_{session}_{k}"
        items = [*items,
                 {"type": "function_call", "name": "exec", "call_id": call,
                  "arguments": orjson.dumps({"cmd": ["ls", f"src/part{k}"]}).decode()},
                 {"type": "function_call_output", "call_id": call,
                  "output": "".join(f"src/part{k}/file{j}.py\n" for j in range(30))}]
    return out


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


def session_cpu(client: httpx.Client, pid: int, bodies: list[bytes]) -> tuple[float, float]:
    """(server CPU of the first turn, of each later one on average), in ms."""
    spent = []
    for body in bodies:
        before = on_cpu(pid)
        with client.stream("POST", "/v1/responses", content=body,
                           headers={"content-type": "application/json"}) as r:
            if r.status_code != 200:
                raise RuntimeError(f"turn answered {r.status_code}: {r.read()[:300]!r}")
            for _ in r.iter_raw():
                pass
        spent.append(on_cpu(pid) - before)
    return spent[0] * 1e3, sum(spent[1:]) / max(1, len(spent) - 1) * 1e3


def measure(root: Path, args: argparse.Namespace, tmp: Path) -> tuple[float, float]:
    server_core, client_core = (cores() + [None, None])[:2]
    proc, port = serve(root, server_core, tmp)
    try:
        base = orjson.loads(RECORDED.read_bytes())
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120,
                          headers={"authorization": "Bearer sk-agent"}) as client:
            session_cpu(client, proc.pid, turns(base, 2, 999))  # warm
            runs = [session_cpu(client, proc.pid, turns(base, args.turns, s))
                    for s in range(args.sessions)]
    finally:
        stop(proc)
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--root", action="append", type=Path, default=[],
                    help="another checkout to measure (before a change); repeatable")
    args = ap.parse_args()
    cs = cores()
    pin_self(cs[1] if len(cs) > 1 else None)
    results = []
    with tempfile.TemporaryDirectory() as name:
        for root in [*args.root, ROOT]:
            results.append((root, *measure(root, args, Path(name))))
    print(f"| checkout | server CPU, first turn (ms) | per later turn (ms), {args.turns} turns |")
    print("|---|---:|---:|")
    for root, first, later in results:
        print(f"| {root} | {first:.1f} | {later:.1f} |")


if __name__ == "__main__":
    main()
