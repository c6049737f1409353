"""Admin fault rules kept in the state across restarts: named in ``fastmode serve``'s banner,
and cleared at start with ``--clear-faults``.

``POST /admin/faults`` keeps its rules in the state (the SQLite file, or Redis), so every
gateway process sharing it applies them, and so does the next run on the same file: a test
killed before its clean-up would otherwise leave, say, a global 503 for whatever runs next. The
banner lists each kept rule; ``--clear-faults`` deletes them before the gateway starts.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from fastmode.gateway.config import StateConfig
from fastmode.gateway.faults import NAMESPACE
from fastmode.gateway.state import open_state


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clear-faults", action="store_true",
                   help="delete the admin fault rules kept in the state (/admin/faults) "
                   "before starting")


async def _kept(state_config: StateConfig, clear: bool) -> tuple[list[str], int]:
    state = open_state(state_config.path, state_config.flush_interval_s,
                       state_config.redis_url, state_config.timeout_s)
    await state.start()
    try:
        rules = state.settings(NAMESPACE)
        cleared = await state.delete_settings(NAMESPACE) if clear else 0
    finally:
        await state.close()
    return [describe_rule(scope, name, value) for (scope, name), value in sorted(
        rules.items())], cleared


def describe_rule(scope: str, name: str, value: dict[str, Any]) -> str:
    """``name: kind p=… tier=…`` and the test id it is scoped to, if any."""
    where = " ".join(f"{k}={v}" for k, v in sorted(value.items()) if k != "kind")
    test = f" (test_id {scope})" if scope else " (every request)"
    return f"{name}: {value.get('kind')} {where}".rstrip() + test


def banner_lines(state_config: StateConfig, clear: bool) -> list[str]:
    """The banner's lines about kept fault rules (none when there are none); with ``clear``,
    the rules are deleted first and the banner says how many."""
    if state_config.path == ":memory:" and not state_config.redis_url:
        return []  # nothing survives a restart
    try:
        rules, cleared = asyncio.run(_kept(state_config, clear))
    except Exception:  # noqa: BLE001 - a state that does not open fails the start itself
        return []
    if clear:
        return [f"  fault rules:          {cleared} kept in the state, cleared (--clear-faults)"
                ] if cleared else []
    if not rules:
        return []
    lines = [f"  fault rules:          {len(rules)} kept in the state from an earlier run, "
             "applied to requests (--clear-faults, or DELETE /admin/faults, to drop them):"]
    lines += [f"    {rule}" for rule in rules]
    return lines
