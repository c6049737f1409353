"""``clients/`` uses the public API only: no import of the server side or of the commands."""

from __future__ import annotations

import ast
from pathlib import Path

CLIENTS = Path(__file__).resolve().parents[2] / "clients"
FORBIDDEN = ("backends", "gateway", "fastmode")


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_clients_import_nothing_from_the_server_or_the_commands():
    files = sorted(CLIENTS.glob("*.py"))
    assert files
    bad = {f.name: sorted(imported_roots(f) & set(FORBIDDEN)) for f in files}
    assert {name: roots for name, roots in bad.items() if roots} == {}
