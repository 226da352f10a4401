"""JUnit XML of gate results (one test case per check) and of fleet runs (one test case per
model on each device), the form CI servers read.

The layout follows the Ant/Jenkins JUnit schema (``junit-10.xsd``) that Jenkins,
GitLab, GitHub Actions reporters and Azure DevOps accept: ``testsuites`` >
``testsuite`` (name, tests, failures, errors, skipped, time, timestamp) >
``properties`` then ``testcase`` (name, classname, time) > ``failure`` (message,
type), ``skipped`` (a limit an inconclusive run left not judged) or ``system-out``. Limit and measured value are in a failed case's failure text
and in a passed case's ``system-out`` (never both: readers show both, so a failure
would read twice).
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from .gate import GateResult

if TYPE_CHECKING:
    from ..lab.results import FleetResult


def _suite(result: GateResult, timestamp: str) -> ET.Element:
    failures = len(result.failed_checks)
    suite = ET.Element(
        "testsuite",
        {
            "name": f"edgequal gate {Path(result.report).name}",
            "tests": str(len(result.checks)),
            "failures": str(failures),
            "errors": "0",
            "skipped": str(len(result.not_judged_checks)),
            "time": "0",
            "timestamp": timestamp,
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("report", result.report),
        ("policy", result.policy),
        ("run_id", result.run_id),
        ("status", result.status),
        ("device", result.device),
        ("signature", result.signature),
        ("passed", str(result.passed).lower()),
        ("retry", str(result.retry).lower()),
    ):
        ET.SubElement(
            props, "property", {"name": name, "value": "" if value is None else str(value)}
        )
    for check in result.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {"name": check.name, "classname": f"edgequal.gate.{check.section}", "time": "0"},
        )
        text = f"limit: {check.limit}\nmeasured: {check.measured}\n{check.message}"
        if not check.judged:  # neither passed nor failed: the run could not measure it
            skipped = ET.SubElement(case, "skipped", {"message": check.message})
            skipped.text = text
        elif not check.passed:
            failure = ET.SubElement(
                case,
                "failure",
                {"message": check.message, "type": "retry" if check.retry else "GateFailed"},
            )
            failure.text = text
        else:  # a failure's body says it once; CI readers show both elements
            out = ET.SubElement(case, "system-out")
            out.text = text
    return suite


def junit_xml(results: list[GateResult]) -> bytes:
    """UTF-8 JUnit XML document for one or more gate results."""
    timestamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    root = ET.Element(
        "testsuites",
        {
            "name": "edgequal gate",
            "tests": str(sum(len(r.checks) for r in results)),
            "failures": str(sum(len(r.failed_checks) for r in results)),
            "errors": "0",
            "time": "0",
        },
    )
    for r in results:
        root.append(_suite(r, timestamp))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write_junit(path: str | Path, results: list[GateResult]) -> None:
    """Write the JUnit file (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(junit_xml(results))


def fleet_junit(result: FleetResult) -> bytes:
    """JUnit XML of a fleet run: one test suite per device, one test case per model."""
    root = ET.Element("testsuites", {"name": f"edgequal fleet {result.lab}"})
    devices = list(dict.fromkeys(r.device for r in result.runs))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(result.started_unix or time.time()))
    for device in devices:
        runs = [r for r in result.runs if r.device == device]
        suite = ET.SubElement(
            root,
            "testsuite",
            {
                "name": f"edgequal fleet {result.lab} {device}",
                "tests": str(len(runs)),
                "failures": str(
                    sum(
                        1
                        for r in runs
                        if r.state not in ("error", "skipped", "pending") and not r.ok
                    )
                ),
                "errors": str(sum(1 for r in runs if r.state == "error")),
                "skipped": str(sum(1 for r in runs if r.state in ("skipped", "pending"))),
                "time": f"{sum(r.duration_s for r in runs):.3f}",
                "timestamp": stamp,
            },
        )
        for r in runs:
            case = ET.SubElement(
                suite,
                "testcase",
                {
                    "name": r.model,
                    "classname": f"edgequal.fleet.{device}",
                    "time": f"{r.duration_s:.3f}",
                },
            )
            if r.state == "error":
                ET.SubElement(case, "error", {"message": r.error or "error", "type": "DeviceError"})
            elif r.state in ("skipped", "pending"):
                ET.SubElement(case, "skipped", {"message": r.error or r.state})
            elif not r.ok:
                kind = "retry" if r.retryable else "NotQualified"
                message = (
                    f"status {r.status}"
                    + (f": {r.reason}" if r.reason else "")
                    + (f"; gate: {r.gate_summary}" if r.gate_summary else "")
                )
                ET.SubElement(case, "failure", {"message": message, "type": kind})
            out = ET.SubElement(case, "system-out")
            out.text = (
                f"status={r.status} run_id={r.run_id} attempts={r.attempts} report={r.report}"
            )
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")
