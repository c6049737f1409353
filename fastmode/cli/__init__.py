"""The ``fastmode`` command: one entry point, one module per subcommand in this package.

``fastmode.cli`` sits above every other package (it may import ``backends``, ``gateway``,
``clients``); nothing but ``fastmode``'s entry points imports it. Each module here has ``register(subparsers)``.
Bad input is a one-line error naming the field, exit status 2, no traceback: a command raises
any exception class named ``UsageError``, or a ``ProfileError`` / ``ConfigError``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# one module per subcommand, each with ``register(subparsers)``
COMMAND_MODULES = (
    "fastmode.cli.predict",
    "fastmode.cli.simulate",
    "fastmode.cli.serve",
    "fastmode.cli.engine",
    "fastmode.cli.chat",
    "fastmode.cli.bench",
    "fastmode.cli.calibrate",
    "fastmode.cli.verify",
    "fastmode.cli.tokenizer",
    "fastmode.cli.replay_check",
)


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
    from fastmode.backends.profiles import ProfileError
    from fastmode.gateway.config import ConfigError

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # only ``engine`` takes (and ignores) flags it does not know: vLLM's
        if args.command != "engine":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.ignored = extra
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
