"""After a fleet run: the change points it brought (history changes over the lab's history),
into the run's JUnit and its Prometheus directory.

A change is **new** in a fleet run when the history with that run's reports shows it and
the history without them did not (the same series, figure and direction within
``min_points`` runs: more nights can move a point a run or two; each earlier change
accounts for one change only, so a change right after another is new): a change is seen only
once ``min_points`` runs follow it, so it is usually new a few nights after its first run
after it.
Each new change that made a figure worse (slower, less throughput, more memory or drift)
by at least the sensitivity's minimum effect (the lab's ``[changes]``, then the gate
policy's) is one failing test case of the suite ``edgequal changes LAB`` in the run's
``junit.xml`` (type ``Change``), unless only the machine explains it (cause ``machine``,
``host/lab/change_causes.py``): that one is a passing case whose ``system-out`` says so,
failing (type ``MachineChange``) only where the lab sets ``fail_on_machine``. With no new
change for the worse, the suite holds one passing case. ``--prometheus DIR`` gains
``DIR/changes.prom``: ``edgequal_change_detected`` per series × figure, 1 where a new
change was found, else 0 (whatever its cause).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from .changes import ChangeReport, ChangeSettings, find_changes


def new_changes(found: list, before: list, window: int) -> list:
    """The changes of ``found`` that ``before`` did not have.

    Each change of ``before`` accounts for at most one of ``found``: the same series, figure
    and direction, its point within ``window`` runs (more nights can move a point a run or
    two), the nearest first. So a second change a run or two after a known one (a slower
    model the night after a load event) is new, not taken for the known one moved."""

    def key(c) -> tuple:
        return (c.device, c.model, c.preset, c.figure, c.worse)

    pairs = sorted(
        (abs(b.index - c.index), i, j)
        for i, c in enumerate(found)
        for j, b in enumerate(before)
        if key(b) == key(c) and abs(b.index - c.index) <= window
    )
    known, used = set(), set()
    for _, i, j in pairs:
        if i not in known and j not in used:
            known.add(i)
            used.add(j)
    return [c for i, c in enumerate(found) if i not in known]


def fleet_changes(history, devices: set[str], fleet_run: str, settings: ChangeSettings):
    """(the analysis of ``devices``' history, the changes new with ``fleet_run``)."""
    from .series import fleet_run_of

    rows = [r for r in history.runs() if r["device"] in devices]
    found = find_changes(rows, settings)
    before = find_changes([r for r in rows if fleet_run_of(r.get("cell")) != fleet_run], settings)
    new = new_changes(found.changes, before.changes, settings.min_points)
    return found, new


def report_fleet_changes(
    history,
    lab,
    fleet_run: str,
    settings: ChangeSettings,
    out_dir: Path,
    prometheus_dir: Path | None = None,
) -> list:
    """The changes new with ``fleet_run``: the suite added to ``out_dir/junit.xml`` and,
    with ``prometheus_dir``, its ``changes.prom``; returns them."""
    from edgequal.contract.openmetrics import write_textfile

    found, new = fleet_changes(history, {d.name for d in lab.devices}, fleet_run, settings)
    junit = Path(out_dir) / "junit.xml"
    if junit.exists():
        add_changes_suite(junit, lab.name, new, settings)
    if prometheus_dir is not None:
        Path(prometheus_dir).mkdir(parents=True, exist_ok=True)
        write_textfile(Path(prometheus_dir) / "changes.prom", changes_metrics(found, new))
    return new


def add_changes_suite(
    junit_path: Path, lab: str, new: list, settings: ChangeSettings | None = None
) -> None:
    """Append the suite of new changes to the fleet's ``junit.xml`` (rewritten in place): a
    failing case per change that fails (``Change.fails``), a passing one, saying why it did
    not fail, per machine change for the worse."""
    settings = settings or ChangeSettings()
    tree = ET.parse(junit_path)
    root = tree.getroot()
    worse = [c for c in new if c.worse]
    failing = [c for c in worse if c.fails(settings)]
    suite = ET.SubElement(
        root,
        "testsuite",
        {"name": f"edgequal changes {lab}", "tests": str(max(1, len(worse)))},
    )
    suite.set("failures", str(len(failing)))
    if not failing:
        ET.SubElement(
            suite,
            "testcase",
            {"name": "no new change beyond noise", "classname": "edgequal.changes"},
        )
    for c in worse:
        case = ET.SubElement(
            suite,
            "testcase",
            {"name": f"{c.model} {c.figure} on {c.device}", "classname": "edgequal.changes"},
        )
        evidence = (
            f"median {c.median_before:.6g} → {c.median_after:.6g} {c.unit}, p {c.p_value:.3g}, "
            f"first run after: {c.first_after['run_id']}, cause: {c.cause}"
        )
        if c.fails(settings):
            kind = "MachineChange" if c.cause == "machine" else "Change"
            failure = ET.SubElement(case, "failure", {"message": c.headline(), "type": kind})
            failure.text = evidence
        else:  # a machine change: shown, not failed ([changes] fail_on_machine fails it)
            out = ET.SubElement(case, "system-out")
            out.text = (
                f"machine change, not failed (the lab's [changes] fail_on_machine = true "
                f"fails it): {c.headline()}\n{evidence}"
            )
    ET.indent(tree)
    tmp = junit_path.with_suffix(".xml.tmp")
    tree.write(tmp, encoding="utf-8", xml_declaration=True)
    tmp.replace(junit_path)


def _label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def changes_metrics(found: ChangeReport, new: list) -> str:
    """OpenMetrics text: ``edgequal_change_detected`` per series × figure (1: a new change)."""
    from .series import figures_of

    flagged = {(c.device, c.model, c.preset or "", c.figure) for c in new}
    lines = [
        "# TYPE edgequal_change_detected gauge",
        "# HELP edgequal_change_detected 1 where this fleet run brought a change point "
        "beyond noise in the series (history changes)",
    ]
    for s in found.series:
        names = []
        for p in s.points:
            for fig in figures_of(p.report.predicate):
                if fig.name not in names:
                    names.append(fig.name)
        for name in names:
            key = (s.device, s.model, s.preset or "", name)
            labels = (
                f'device="{_label(s.device)}",model="{_label(s.model)}",'
                f'preset="{_label(s.preset or "")}",figure="{_label(name)}"'
            )
            lines.append(f"edgequal_change_detected{{{labels}}} {1 if key in flagged else 0}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"
