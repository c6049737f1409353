"""The layering rules of docs/architecture.md, checked on the source: what may import what, and
modules small enough to hold one job."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the installed package's layers: fastmode.<layer>, and the public face (fastmode's own modules
# and fastmode.cli) as "fastmode"
LAYERS = ("workload", "backends", "gateway", "clients")
PACKAGES = (*LAYERS, "fastmode")
# programs over the project (benchmarks, deployment checks): they import the packages' public
# modules and bench's shared helpers; nothing in the packages imports them
PROGRAMS = ("bench", "scripts")
# package -> project packages (and program directories) it must not import
FORBIDDEN = {
    "workload": {"backends", "gateway", "clients", "fastmode", *PROGRAMS},
    "backends": {"gateway", "clients", "fastmode", *PROGRAMS},
    "gateway": {"clients", "fastmode", *PROGRAMS},
    "clients": {"backends", "gateway", "fastmode", *PROGRAMS},  # public API only: any server
    "fastmode": {*PROGRAMS},
}
MAX_LINES = 450  # "no module over ~400 lines"
# gateway/'s floors, lowest first: a module imports only from its own floor and those below it
# (docs/architecture.md lists them in this order). The top-level modules are floors of one.
GATEWAY_FLOORS = (
    "errors", "money", "overlay", "fault_kinds", "cassette_config", "config", "engine_config",
    "data", "__init__",                      # the basics: errors, money, the config
    "state",                                 # shared state behind one interface
    "values", "http",                        # what a request resolves into; HTTP pieces
    "stored", "observe", "testing",          # stored state, observation, per-test state
    "protocols",                             # the protocol plug-ins
    "engines", "remote",                     # the backends behind the admission interface
    "faults", "cassettes",                   # features the pipeline applies
    "pipeline",                              # the turn pipeline
    "endpoints", "edge", "websocket", "batches", "dashboard",  # on top of the pipeline
    "app", "workers",                        # the app, and the processes that serve it
)
MAX_GATEWAY_TOP_MODULES = 10


def folder(package: str) -> Path:
    return ROOT / "fastmode" / package if package in LAYERS else ROOT / package


def modules(package: str) -> list[Path]:
    """The files of one layer (``fastmode``: the face, without the layers under it)."""
    found = sorted(folder(package).rglob("*.py"))
    if package == "fastmode":
        inner = tuple(folder(layer) for layer in LAYERS)
        found = [p for p in found if not any(p.is_relative_to(d) for d in inner)]
    return found


def layer_of(module: str) -> str:
    """The layer a dotted module name belongs to."""
    parts = module.split(".")
    if parts[0] == "fastmode":
        return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "fastmode"
    return parts[0]


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {layer_of(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(layer_of(node.module))
            if node.module == "fastmode":
                out |= {n.name for n in node.names if n.name in LAYERS}
    return out & {*PACKAGES, *PROGRAMS}


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
    for p in sorted((folder("gateway") / "protocols").rglob("*.py")):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and any(
                part in ("turn", "app", "websocket", "remote")
                for part in node.module.split(".")
            ):
                bad.append(f"{p.relative_to(ROOT)}: {node.module}")
    assert bad == []


def program_import_problems(path: Path) -> list[str]:
    """What a file of bench/ or scripts/ must not do: import a private module or name of the
    project (``_x``), the tests, scripts/, a sibling by its bare file name or relatively (it
    would work one way of running the file only), or edit ``sys.path``."""
    siblings = {p.stem for d in PROGRAMS for p in (ROOT / d).glob("*.py")} - {"__init__"}
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        mods: list[tuple[str, list[str]]] = []
        if isinstance(node, ast.Import):
            mods = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.append(f"relative import {'.' * node.level}{node.module or ''}")
                continue
            mods = [(node.module or "", [alias.name for alias in node.names])]
        elif (isinstance(node, ast.Attribute) and node.attr == "path"
              and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            out.append(f"sys.path (line {node.lineno})")
        for module, names in mods:
            parts = module.split(".")
            if parts[0] in ("tests", "conftest", "scripts"):
                out.append(f"imports {module}")
            elif parts[0] in siblings:
                out.append(f"imports {module} by its file name (bench.{module}?)")
            elif parts[0] in ("fastmode", "bench"):
                private = [p for p in parts[1:] + names if p.startswith("_")]
                if private:
                    out.append(f"imports private {module}: {', '.join(private)}")
    return out


@pytest.mark.parametrize("directory", PROGRAMS)
def test_programs_import_public_modules_without_path_edits(directory: str) -> None:
    bad = {
        str(p.relative_to(ROOT)): problems
        for p in modules(directory)
        if (problems := program_import_problems(p))
    }
    assert bad == {}


def test_no_module_over_the_size_limit() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for package in (*PACKAGES, *PROGRAMS)
        for p in modules(package)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert big == {}


def project_imports(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> the project modules it imports, counting every import statement: at the top,
    inside functions and under ``TYPE_CHECKING`` (a circle hidden there is still a circle).
    ``from a import b`` counts ``a`` (its ``__init__`` runs) and ``a.b`` when that is a module;
    relative imports are resolved against the importing module's package."""
    mods = {}
    for p in (p for package in packages for p in modules(package)):
        parts = p.relative_to(ROOT).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of an import graph with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return sorted(circles)


def test_no_import_circle_anywhere() -> None:
    """Each strongly connected component of the whole project's import graph is one module.
    A circle means two modules that cannot be understood (or tested) apart."""
    assert import_circles(project_imports()) == []


def test_the_suites_schedule_names_files_that_exist() -> None:
    """tests/conftest.py SLOWEST_FILES orders the suite for its workers: a renamed or deleted
    file there would quietly put a long file back at the end of the run."""
    from conftest import SLOWEST_FILES

    tests = Path(__file__).parent
    assert [f for f in SLOWEST_FILES if not (tests / f).is_file()] == []
    assert len(set(SLOWEST_FILES)) == len(SLOWEST_FILES)


def test_the_architecture_page_names_every_gateway_package() -> None:
    """docs/architecture.md's table of gateway/'s subpackages is the folders, no more, no less."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## gateway/ by concern", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `gateway/(\w+)/` \|", table, re.MULTILINE))
    folders = {p.parent.name for p in folder("gateway").glob("*/__init__.py")}
    assert named == folders


def gateway_floor(module: str) -> str:
    """The floor of a ``fastmode.gateway`` module: its subpackage, or the top-level module."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def test_the_gateways_floors_are_declared_and_nothing_imports_upward() -> None:
    """Every module of gateway/ imports from its own floor or one below (counting imports
    inside functions and under ``TYPE_CHECKING``)."""
    graph = project_imports(("gateway",))
    assert {gateway_floor(m) for m in graph} == set(GATEWAY_FLOORS)
    rank = {floor: i for i, floor in enumerate(GATEWAY_FLOORS)}
    upward = sorted(
        f"{m} -> {d}" for m, deps in graph.items() for d in deps
        if d.startswith("fastmode.gateway") and rank[gateway_floor(d)] > rank[gateway_floor(m)])
    assert upward == []


def test_each_gateway_package_says_what_it_holds() -> None:
    top = sorted(p.stem for p in folder("gateway").glob("*.py") if p.stem != "__init__")
    assert len(top) <= MAX_GATEWAY_TOP_MODULES, top
    for init in folder("gateway").glob("*/__init__.py"):
        if init.parent.name == "data":
            continue  # package data (the built-in config), no code
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 80, init


def test_the_architecture_page_lists_the_floors_in_order() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## gateway/ by concern", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^\| `gateway/(\w+)/` \|", table, re.MULTILINE)
    assert named == [f for f in GATEWAY_FLOORS if f in set(named)]

