"""The ``fastmode`` command: one entry point, subcommands contributed by each package.

Each package keeps its own commands (``backends.cli``: predict, simulate; ``gateway.serve_cli``:
serve; ``gateway.engine_cli``: engine; ``clients.cli``: chat, bench) and registers them here.
Bad input is a one-line error naming the field, exit status 2, no traceback: a command raises
any exception class named ``UsageError``, or a ``ProfileError`` / ``ConfigError``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES = ("backends.cli", "gateway.serve_cli", "gateway.engine_cli", "clients.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastmode",
        description="A mock LLM serving gateway with fast-mode tiers, speeds from physics.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from backends.profiles import ProfileError
    from gateway.config import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ProfileError, ConfigError) as exc:
        print(f"fastmode {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if type(exc).__name__ != "UsageError":
            raise
        print(f"fastmode {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
