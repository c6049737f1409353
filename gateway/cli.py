"""The ``fastmode`` command: one entry point, subcommands contributed by each package.

Each package keeps its own commands (``backends.cli``: predict, simulate; ``gateway.serve_cli``:
serve; ``clients.cli``: chat, bench) and registers them here. Bad input is a one-line error
naming the field, exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastmode",
        description="A mock LLM serving gateway with fast-mode tiers, speeds from physics.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from backends import cli as backends_cli

    backends_cli.register(sub)
    try:
        from gateway import serve_cli
    except ImportError:  # pragma: no cover - during bootstrap only
        serve_cli = None
    if serve_cli is not None:
        serve_cli.register(sub)
    try:
        from clients import cli as clients_cli
    except ImportError:  # pragma: no cover
        clients_cli = None
    if clients_cli is not None:
        clients_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from backends.cli import UsageError

    from backends.profiles import ProfileError
    from gateway.config import ConfigError

    try:
        return int(args.func(args) or 0)
    except (UsageError, ProfileError, ConfigError) as exc:
        print(f"fastmode {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
