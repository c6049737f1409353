"""The coding agents on the three speeds: each installed CLI (Claude Code, Codex CLI, opencode,
pi) does one fixed three-step task (read README.md, edit its first line, say what changed) in
a scratch folder, against `fastmode serve` on the built-in config, once on standard, once with
its fast switch and once on spark; the table gives the median session over ``--runs``
sessions: wall time, tokens billed, cost, the tiers that served it.

What the physics predicts: a session's wall time is the CLI's own start-up and tool runs, plus
each step's time to first token (prefill of a 10-50k-token agent prompt: no faster on the fast
tier) plus its output tokens (thinking, the call or the answer) at the tier's speed, ~2.2x on
fast and ~18x on spark. So the session is faster on fast by less than 2.2x, by as much as its
output share of the time, and much faster on spark; the ratio column shows what it was.

Sessions run inside a network namespace with only loopback (clients.agent_cli); install the
CLIs with `make agents`. Usage: python bench/agent_sessions.py [--runs N] [--clis claude,...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from fastmode.clients.agent_cli import README, Session, run_session

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "tests" / "agents" / "node_modules" / ".bin"
TASK = "change the first line of README.md to Hello fastmode"
SPARK = {"claude": "frontier-spark", "codex": "gpt-5.3-codex-spark",
         "opencode": "frontier-spark", "pi": "frontier-spark"}


def sessions(cli: str, speed: str, runs: int, serve: tuple[str, ...]) -> list[Session]:
    out = []
    for _ in range(runs):
        s = run_session(cli, TASK, bin_dir=BIN, serve=serve, edits=True, fast=speed == "fast",
                        model=SPARK[cli] if speed == "spark" else None)
        done = s.files.get("README.md") == README.replace(README.splitlines()[0],
                                                            "Hello fastmode")
        if s.exit_code != 0 or not done:
            print(f"  {cli} {speed}: exit {s.exit_code}, edit applied: {done}", file=sys.stderr)
        out.append(s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clis", default="claude,codex,opencode,pi")
    args = ap.parse_args()
    serve = (str(Path(sys.executable).with_name("fastmode")), "serve")
    print(f"one task ({TASK!r}), built-in config, median of {args.runs} sessions each")
    print(f"{'CLI':9} {'speed':9} {'model':22} {'wall s':>7} {'x std':>6} {'in tok':>8} "
          f"{'out tok':>8} {'cost $':>8}  tiers          done")
    for cli in args.clis.split(","):
        if not (BIN / cli).exists():
            print(f"{cli}: not installed (make agents)")
            continue
        base = None
        for speed in ("standard", "fast", "spark"):
            runs = sessions(cli, speed, args.runs, serve)
            wall = statistics.median(s.wall_s for s in runs)
            base = base or wall
            tin = statistics.median(s.tokens[0] for s in runs)
            tout = statistics.median(s.tokens[1] for s in runs)
            cost = statistics.median(s.cost_usd for s in runs)
            tiers = ",".join(sorted({t for s in runs for t in s.tiers}))
            ok = sum(s.exit_code == 0 and "Hello fastmode" in s.files.get("README.md", "")
                     for s in runs)
            print(f"{cli:9} {speed:9} {runs[0].model:22} {wall:7.1f} {base / wall:6.2f} "
                  f"{tin:8.0f} {tout:8.0f} {cost:8.4f}  {tiers:14} {ok}/{len(runs)}")


if __name__ == "__main__":
    main()
