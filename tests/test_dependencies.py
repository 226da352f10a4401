"""The "may import" table of docs/architecture.md, enforced: every import between edgequal's
folders (or the modules the table names on their own) is one the table allows, and no
import circle joins modules, or the table's folders.

The package is read as installed: the ``package-dir`` mapping puts ``edgequal.agent`` in
agent/, ``edgequal`` itself in library/, so the modules are found through importlib (each
package's ``__path__``), and every import, lazy ones inside functions included, is read
from its source with ``ast``, relative imports resolved against the importing module.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
import re
from pathlib import Path

import edgequal

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
TOPS = ("agent", "contract", "host", "protos", "device_profiles")


def installed_modules() -> dict[str, Path]:
    """Every module of the installed ``edgequal`` package: name -> source file."""
    found = list(pkgutil.walk_packages(edgequal.__path__, "edgequal."))
    out = {"edgequal": Path(edgequal.__file__)}
    for top in TOPS:
        pkg = importlib.import_module(f"edgequal.{top}")
        out[pkg.__name__] = Path(pkg.__file__)
        found += pkgutil.walk_packages(pkg.__path__, f"{pkg.__name__}.")
    for info in found:
        where = Path(info.module_finder.path) / info.name.rsplit(".", 1)[1]
        source = where / "__init__.py" if info.ispkg else where.with_suffix(".py")
        if source.is_file():  # not the generated stubs' .pyi, nor a compiled module
            out[info.name] = source
    return out


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _type_only_lines(tree: ast.Module) -> set[int]:
    """The lines of ``if TYPE_CHECKING:`` blocks: imports there are read by type checkers only."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _imported(name: str, path: Path, known: dict[str, Path], with_type_only: bool = True):
    """(line, module) for every edgequal module ``name`` imports, at any depth of its code;
    with ``with_type_only`` False, not those under ``if TYPE_CHECKING:``."""
    is_pkg = path.name == "__init__.py"
    tree = _tree(path)
    skipped = set() if with_type_only else _type_only_lines(tree)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" for a in node.names]
            targets = [t if t in known else module for t in targets]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                yield node.lineno, target


@functools.cache
def import_graph() -> tuple[dict[str, Path], dict[str, dict[str, int]]]:
    """The modules and, for each, the edgequal modules it imports (with the first line)."""
    modules = installed_modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        graph[name] = {}
        for line, target in _imported(name, path, modules):
            graph[name].setdefault(target, line)
    return modules, graph


def layout_path(name: str, modules: dict[str, Path]) -> str:
    """A module's path in the repository's layout: ``edgequal.host.lab.fleet`` ->
    ``host/lab/fleet.py``, ``edgequal.device`` -> ``library/device.py``, a package its
    ``__init__.py``."""
    parts = name.split(".")[1:]
    if not parts or parts[0] not in TOPS:
        parts = ["library", *parts]
    if modules[name].name == "__init__.py":
        return "/".join(parts) + "/__init__.py"
    return "/".join(parts) + ".py"


@functools.cache
def may_import_table() -> dict[str, list[str]]:
    """The rows of docs/architecture.md's "may import" table: folder or module -> allowed."""
    text = DOC.read_text()
    section = text.split("## Who may import whom", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        rows[cells[0].strip("`")] = re.findall(r"`([^`]+)`", cells[1])
    return rows


def unit_of(path: str, rows: dict[str, list[str]]) -> str:
    """The table's most specific row for a module path (a module's own row, else its
    innermost folder's)."""
    matches = [r for r in rows if path == r or (r.endswith("/") and path.startswith(r))]
    assert matches, f"{path} falls under no row of the may-import table"
    return max(matches, key=len)


def _inside(path: str, row: str) -> bool:
    """Whether ``path`` lies in the folder ``row`` (a folder holds the modules it has rows for)."""
    return row.endswith("/") and path.startswith(row)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_table_is_read_and_covers_every_module():
    modules, _ = import_graph()
    rows = may_import_table()
    assert {"contract/", "agent/", "library/", "cli/", "host/transport/local.py"} <= set(rows)
    assert rows["contract/"] == ["protos/"]
    assert "edgequal.agent.worker.main" in modules and "edgequal.contract.plan" in modules
    for name in modules:
        unit_of(layout_path(name, modules), rows)


def test_every_import_is_one_the_table_allows():
    modules, graph = import_graph()
    rows = may_import_table()
    against = []
    for name, targets in graph.items():
        source = layout_path(name, modules)
        unit = unit_of(source, rows)
        for target, line in targets.items():
            path = layout_path(target, modules)
            if unit_of(path, rows) == unit or _inside(path, unit):
                continue  # within its row, or a module of its folder that has a row of its own
            if not any(path == a or (a.endswith("/") and path.startswith(a)) for a in rows[unit]):
                against.append(f"{source}:{line} imports {path} ({unit} may import {rows[unit]})")
    assert not against, "\n".join(against)


def test_no_import_circle_between_modules():
    # An import a type checker alone reads (a gate family naming the Policy its checks
    # take, while the policy reads the sections the families declare) is no circle at
    # run time; the may-import table still holds for it.
    modules = installed_modules()
    graph = {
        name: {t for _, t in _imported(name, path, modules, False)}
        for name, path in modules.items()
    }
    assert _cycles(graph) == []


def test_no_import_circle_between_the_tables_rows():
    modules, graph = import_graph()
    rows = may_import_table()
    units: dict[str, set[str]] = {}
    for name, targets in graph.items():
        unit = unit_of(layout_path(name, modules), rows)
        units.setdefault(unit, set())
        for target in targets:
            other = unit_of(layout_path(target, modules), rows)
            if other != unit and not _inside(other, unit) and not _inside(unit, other):
                units[unit].add(other)
    assert _cycles(units) == []


def test_a_circle_and_a_forbidden_import_are_caught():
    """The checks themselves: a made-up circle is found, and a row's list is honoured."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    rows = {"host/": [], "host/transport/": ["contract/"], "host/transport/local.py": ["agent/"]}
    assert unit_of("host/transport/grpc.py", rows) == "host/transport/"
    assert unit_of("host/transport/local.py", rows) == "host/transport/local.py"
    assert unit_of("host/lab/fleet.py", rows) == "host/"


def test_no_private_name_is_imported_from_another_module():
    """What one module shares with another is public; a ``_name`` stays in its module."""
    modules, _ = import_graph()
    private = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (
                node.level or "edgequal" in (node.module or "")
            ):
                private += [
                    f"{layout_path(name, modules)}:{node.lineno} imports {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not private, "\n".join(private)
