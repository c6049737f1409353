"""``fastmode replay-check DIR``: validate the cassettes of a directory (docs/replay.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


class UsageError(Exception):
    """A bad argument: one line, exit status 2 (``fastmode.cli.main``)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("replay-check", help="validate recorded cassettes (schema, every "
                       "stream well-formed for its protocol)")
    p.add_argument("dir", help="the cassette directory (*.jsonl)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fastmode.gateway.cassettes.check import check

    if not Path(args.dir).is_dir():
        raise UsageError(f"{args.dir}: not a directory")
    report = check(args.dir)
    for problem in report.problems:
        print(problem)
    verdict = "ok" if report.ok else f"{len(report.problems)} problem(s)"
    print(f"{report.entries} exchange(s) in {report.files} cassette file(s): {verdict}")
    return 0 if report.ok else 1
