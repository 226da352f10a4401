"""``edgequal rerun REPORT``: repeat a report's signed plan with the same artifacts, on the
same device, and say whether the figures came out the same.

What is repeated is what the report signed: its plan as it ran (preset, profile's board
fields and flags already applied: shapes, threads, runtime environments by name, phase
lengths, a committed policy's digest), and its artifacts by sha256. Each artifact is
looked for, in order: the file given (``--model``, ``--golden``: its digest must be the
report's, else a one-line error, exit 2), the path the host recorded beside the report
(its sidecar, ``devices/reproduce.py``), the report's own folder by the subject's name.
The device is the one that signed the report (its trusted name) unless ``--device``.

The two reports are then compared as ``edgequal compare`` does (``compare.py``: each
figure SAME / DIFFERENT / UNKNOWN by ``verdict.py``, run against run: a report's
``--repeat N`` runs, or the board's noise from history (``--history``), give the spread;
one run a side with neither is UNKNOWN; the policy's ``[baseline]`` settings when given). Exit codes: 0 reproduced (no figure DIFFERENT; UNKNOWN means the runs
cannot tell, not that they differ), 1 a figure DIFFERENT, 2 bad input (a report that does
not verify, an artifact not found or of another digest), 3 device, transport or runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgequal.contract.plan import Plan
from edgequal.contract.signing import RolesUnmarked, subject_with_role

from ..devices.reproduce import read_sidecar
from ..devices.trust import KnownDevices
from ..errors import UsageError, printable
from .compare import Comparison, compare_reports
from .repeat import baseline_artifact
from .report_file import ReportFile, load_report
from .verdict import DIFFERENT, SAME, UNKNOWN

EXIT_REPRODUCED = 0
EXIT_DIFFERENT = 1


@dataclass
class RerunInputs:
    """What a rerun repeats: the verified report, its signed plan, the device that signed
    it, and its artifacts found by digest on this host."""

    report: ReportFile
    plan: Plan
    device: str
    model: Path
    golden: Path | None = None
    coload_models: dict[str, Path] = field(default_factory=dict)
    model_signature: Path | None = None


def _subject(report: ReportFile, role: str) -> dict | None:
    try:
        found = subject_with_role(report.subjects, role)
    except RolesUnmarked as e:
        raise UsageError(f"cannot rerun {report.path}: {e}") from e
    return dict(found) if found else None


def _given(path: Path, subject: dict, flag: str) -> Path:
    """``--model``/``--golden``: the file must be the report's artifact, byte for byte."""
    from edgequal.contract.artifacts import file_sha256

    if not path.is_file():
        raise UsageError(f"{flag} {printable(path)}: no such file")
    digest = file_sha256(path)
    if digest != subject["sha256"]:
        raise UsageError(
            f"{flag} {printable(path)} is sha256 {digest[:12]}…, not the report's "
            f"{subject['name']} (sha256 {subject['sha256'][:12]}…)",
            hint="a rerun repeats the same artifacts; to measure another one, use qualify",
        )
    return path


def rerun_inputs(
    report_path: Path,
    *,
    known: KnownDevices,
    model: Path | None = None,
    golden: Path | None = None,
) -> RerunInputs:
    """The plan, device and artifacts ``report_path`` names, found on this host (module
    docstring). UsageError (exit 2) when the report does not verify, or an artifact is
    not found by its digest or the one given has another."""
    from edgequal.contract.errors import BadInput

    from ..errors import VerificationFailed

    try:
        report = load_report(report_path, known=known, require=True)
    except VerificationFailed as e:
        raise UsageError(
            f"cannot rerun {printable(report_path)}: {e}", hint="rerun repeats verified reports"
        ) from e
    try:
        plan = Plan.from_json(report.predicate.get("plan") or {})
    except (BadInput, TypeError, ValueError) as e:
        raise UsageError(f"cannot rerun {printable(report_path)}: its plan: {e}") from e
    sidecar = read_sidecar(report_path) or {}
    recorded = {
        a.get("sha256"): Path(a["path"])
        for a in sidecar.get("artifacts") or []
        if isinstance(a, dict) and isinstance(a.get("path"), str)
    }
    folder = Path(report_path).parent

    def find(subject: dict, given: Path | None, flag: str) -> Path:
        if given is not None:
            return _given(given, subject, flag)
        where = [recorded[subject["sha256"]]] if subject["sha256"] in recorded else []
        return baseline_artifact(
            subject["sha256"], subject["name"], [*where, folder], flag, whose="the report's"
        )

    model_subject = _subject(report, "model")
    if model_subject is None:
        raise UsageError(f"cannot rerun {printable(report_path)}: it names no model")
    golden_subject = _subject(report, "golden")
    if golden is not None and golden_subject is None:
        raise UsageError(f"--golden: {printable(report_path)} was measured without a golden set")
    found = RerunInputs(
        report=report,
        plan=plan,
        device=report.device_name or "",
        model=find(model_subject, model, "--model"),
        golden=find(golden_subject, golden, "--golden") if golden_subject else None,
    )
    for s in report.subjects:
        if s.get("role") == "coload":
            found.coload_models[s["sha256"]] = find(s, None, "the co-load model's path")
        elif s.get("role") == "model_signature":
            found.model_signature = find(s, None, "--model-signature")
    return found


@dataclass
class RerunResult:
    """The two reports compared: each figure's verdict, whether the plan and the artifacts
    the devices signed are the same, and the exit code."""

    comparison: Comparison
    same_plan: bool
    same_artifacts: bool

    @property
    def verdicts(self) -> dict[str, str]:
        """Figure → SAME, DIFFERENT or UNKNOWN (figures both runs measured)."""
        out = {}
        for row in self.comparison.rows:
            v = row.verdicts[1] if len(row.verdicts) > 1 else None
            if v:
                out[row.figure] = v["verdict"]
        return out

    @property
    def details(self) -> dict[str, dict]:
        """Figure → its verdict's fields (runs, spread and its source, interval, why)."""
        out = {}
        for row in self.comparison.rows:
            v = row.verdicts[1] if len(row.verdicts) > 1 else None
            if v:
                out[row.figure] = v
        return out

    @property
    def different(self) -> list[str]:
        """The figures that came out DIFFERENT."""
        return [f for f, v in self.verdicts.items() if v == DIFFERENT]

    @property
    def exit_code(self) -> int:
        """0 reproduced (no figure DIFFERENT), 1 a figure DIFFERENT."""
        return EXIT_DIFFERENT if self.different else EXIT_REPRODUCED

    def counts(self) -> dict[str, int]:
        """How many figures of each verdict."""
        values = list(self.verdicts.values())
        return {v: values.count(v) for v in (SAME, DIFFERENT, UNKNOWN)}

    def headline(self) -> str:
        """One line: reproduced or not, and how many figures of each verdict."""
        c = self.counts()
        tally = f"{c[SAME]} SAME, {c[DIFFERENT]} DIFFERENT, {c[UNKNOWN]} UNKNOWN"
        if self.different:
            return f"not reproduced: {', '.join(self.different)} DIFFERENT ({tally})"
        return f"reproduced: no figure DIFFERENT ({tally})"

    def to_json(self) -> dict:
        """JSON-ready fields: the comparison, the verdict per figure, the exit code."""
        return {
            "reproduced": not self.different,
            "same_plan": self.same_plan,
            "same_artifacts": self.same_artifacts,
            "verdicts": self.verdicts,
            "different": self.different,
            "exit_code": self.exit_code,
            "comparison": self.comparison.to_json(),
        }


def judge_rerun(original: ReportFile, rerun: ReportFile, settings: dict | None = None, prior=None):
    """Compare the rerun with the original as ``compare`` does (``settings``: a policy's
    ``[baseline]``, ``prior`` the board's spread from history); also whether both signed
    the same plan and the same artifacts."""
    digests = [
        sorted((s.get("role") or "", s["sha256"]) for s in r.subjects) for r in (original, rerun)
    ]
    return RerunResult(
        compare_reports([original, rerun], settings, prior),
        same_plan=original.predicate.get("plan") == rerun.predicate.get("plan"),
        same_artifacts=digests[0] == digests[1],
    )
