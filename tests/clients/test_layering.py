"""``fastmode/clients/`` uses the public API only: no import of the server side or of the commands."""

from __future__ import annotations

import ast
from pathlib import Path

CLIENTS = Path(__file__).resolve().parents[2] / "fastmode" / "clients"
# fastmode's other layers and its face (the public API is the wire, not a module)
ALLOWED = ("fastmode.clients", "fastmode.workload")


def imported_modules(path: Path) -> set[str]:
    """Every module named by an import (a relative one that leaves ``fastmode/clients/`` as ``..``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.add(node.module)
            elif node.level > 1:
                found.add("." * node.level + (node.module or ""))
    return found


def forbidden(module: str) -> bool:
    return module.startswith(".") or (module.split(".")[0] == "fastmode"
                                      and not module.startswith(ALLOWED))


def test_clients_import_nothing_from_the_server_or_the_commands():
    files = sorted(CLIENTS.glob("*.py"))
    assert files
    bad = {f.name: sorted(m for m in imported_modules(f) if forbidden(m)) for f in files}
    assert {name: roots for name, roots in bad.items() if roots} == {}
