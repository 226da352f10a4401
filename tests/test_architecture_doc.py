"""docs/architecture.md's tables of the parts, checked against the folders: every folder of
cli/, host/, agent/ and contract/ has its row, every module in it is named in that row, and
every module a row names is there (a module added, moved or removed updates its row)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SECTIONS = {
    "### cli/": "cli",
    "### host/": "host",
    "### contract/": "contract",
    "### agent/": "agent",
}
SKIP = {"__init__.py", "__main__.py"}


def part_rows() -> list[tuple[str, list[str]]]:
    """``(package, cells)`` of every row of the tables under "The parts"."""
    rows, package = [], None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            package = None
        for heading, name in SECTIONS.items():
            if line.startswith(heading):
                package = name
        if package and line.startswith("| ") and not line.startswith("| ---"):
            rows.append((package, [c.strip() for c in line.strip().strip("|").split("|")]))
    return [(p, cells) for p, cells in rows if cells[0] not in ("folder", "module", "part")]


def modules_named(text: str) -> set[str]:
    return set(re.findall(r"`([A-Za-z0-9_/]+\.py)`", text))


def modules_in(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.py") if p.name not in SKIP}


def test_every_folder_has_a_row_naming_its_modules_and_no_other():
    rows = part_rows()
    assert len(rows) > 30, "the tables of the parts were not found"
    problems, top = [], {name: set() for name in SECTIONS.values()}
    folders_with_rows = set()
    for package, cells in rows:
        folder = re.fullmatch(r"`([a-z_/]+)/`", cells[0])
        if folder is None:  # a module row, or host's "top level"
            text = cells[1] if cells[0] == "top level" else cells[0]
            top[package] |= {n for n in modules_named(text) if "/" not in n}
            continue
        path = ROOT / package / folder.group(1)
        folders_with_rows.add(path)
        leaf = folder.group(1).split("/")[-1]
        named = {
            n.split("/")[-1]
            for n in modules_named(cells[1])
            if "/" not in n or n.startswith(f"{leaf}/")
        }
        have = modules_in(path)
        problems += [f"{package}/{folder.group(1)}/{m}: not in its row" for m in have - named]
        problems += [f"{package}/{folder.group(1)}/{m}: named, not there" for m in named - have]
    for package, named in top.items():
        have = modules_in(ROOT / package)
        problems += [f"{package}/{m}: not in the tables" for m in have - named]
        problems += [f"{package}/{m}: named, not there" for m in named - have]
    for package in SECTIONS.values():
        for init in (ROOT / package).rglob("__init__.py"):
            if init.parent != ROOT / package and init.parent not in folders_with_rows:
                problems.append(f"{init.parent.relative_to(ROOT)}/: no row")
    assert not problems, "docs/architecture.md's parts: " + "; ".join(sorted(problems))
