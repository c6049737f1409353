"""What ``fastmode predict`` and ``fastmode simulate`` share: the engine from a config, output.

``UsageError`` is the one-line error of these commands: ``fastmode.cli.main`` prints any exception
class of that name as ``fastmode <command>: error: <message>`` and exits with status 2.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.profiles import ProfileError


class UsageError(Exception):
    """Bad command-line input: a one-line message naming the option and what is allowed."""


def load_engine(path: str | None) -> tuple[EngineSpec, str]:
    """The engine built from a config file (or the default) and its reference tier."""
    from fastmode.gateway.config import load_config

    cfg = load_config(path)
    try:
        spec = build(cfg.sim())
    except ProfileError:
        raise
    except ValueError as exc:
        raise UsageError(f"config: {exc}") from None
    return spec, cfg.pricing.reference_tier


def clean(obj: Any) -> Any:
    """JSON-safe: non-finite floats become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    return obj


def print_json(obj: dict[str, Any]) -> None:
    print(json.dumps(clean(obj), indent=2, allow_nan=False))


def fmt_s(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if x < 1.0:
        return f"{x * 1e3:.3g} ms"
    return f"{x:.3g} s"


def fmt_n(x: float | None, digits: int = 1) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.{digits}f}"


# a pipe or a file has no width: rich would squeeze (and cut, with "…") every table to 80
# columns; tables take only the width they need, so a wide cap loses nothing
PIPE_WIDTH = 1000


def console() -> Any:
    """A rich console on stdout (imported late: ``--json`` runs never load rich); piped, as
    wide as the tables are."""
    from rich.console import Console

    out = Console(file=sys.stdout, highlight=False, soft_wrap=False)
    if not out.is_terminal:
        out = Console(file=sys.stdout, highlight=False, soft_wrap=False, width=PIPE_WIDTH)
    return out


def table(columns: list[str]) -> Any:
    """A borderless table: first column left-aligned labels, the others right-aligned."""
    from rich.table import Table

    t = Table(show_edge=False, pad_edge=False)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=True)
    return t
