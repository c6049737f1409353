"""The layering rules of docs/architecture.md, checked on the source: what may import what, and
modules small enough to hold one job."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("workload", "backends", "gateway", "clients", "commands")
# package -> project packages it must not import
FORBIDDEN = {
    "workload": {"backends", "gateway", "clients", "commands"},
    "backends": {"gateway", "clients", "commands"},
    "gateway": {"clients", "commands"},
    "clients": {"backends", "gateway", "commands"},  # public API only: measures any server
    "commands": set(),
}
MAX_LINES = 450  # "no module over ~400 lines"


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_layering(package: str) -> None:
    bad = {
        str(p.relative_to(ROOT)): sorted(imported_packages(p) & FORBIDDEN[package])
        for p in modules(package)
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_protocol_plugins_do_not_know_the_pipeline() -> None:
    """A protocol says how its wire format looks; the pipeline and the transports use it."""
    bad = []
    for p in modules("gateway/protocols"):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and any(
                part in ("turn", "app", "websocket", "remote")
                for part in node.module.split(".")
            ):
                bad.append(f"{p.relative_to(ROOT)}: {node.module}")
    assert bad == []


def test_no_module_over_the_size_limit() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for package in PACKAGES
        for p in modules(package)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert big == {}
