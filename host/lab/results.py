"""What a fleet run produced: one record per model and device, and the run's index.

Apart from ``fleet.py`` (which runs them) so the JUnit writer and the matrix page, which
``fleet.py`` calls, name these types without importing the run back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..transport.base import holder_name

RETRY_STATUSES = ("inconclusive", "incomplete")
"""Report statuses a fleet run measures again: interference, or a run that could not finish."""

OK_STATUSES = ("passed", "degraded")


@dataclass
class RunRecord:
    """One model on one device: its state, the signed report's status, where its files are."""

    model: str
    device: str
    state: str = "pending"
    """pending, waiting, running, retrying, then passed/degraded/failed/inconclusive/
    incomplete (the report's status), error (no report) or skipped."""
    status: str | None = None
    run_id: str | None = None
    attempts: int = 0
    report: str | None = None
    page: str | None = None
    error: str | None = None
    resumed: bool = False
    gate_passed: bool | None = None
    gate_summary: str | None = None
    duration_s: float = 0.0
    reason: str | None = None
    """The report's reason for its status (why it is inconclusive, incomplete, failed)."""
    waiting_for: str | None = None
    """While waiting: what for (the device's lease, who holds it, the place in line)."""
    baseline_verdict: str | None = None
    """Gated against a baseline: SAME, DIFFERENT or UNKNOWN (host/judge/verdict.py), after
    any pairs run again to decide it (``repeat_pairs``)."""
    repeat_pairs: int = 0

    @property
    def ok(self) -> bool:
        """Qualified: an acceptable status and, when gated, a passed gate."""
        if self.state not in OK_STATUSES:
            return False
        return self.gate_passed is not False

    @property
    def why(self) -> str:
        """Why the run is where it is, in one line (the terminal's ``why`` column and the
        page's cell): the error, else the report's reason, else what it waits for."""
        if self.error or self.reason:
            return self.error or self.reason or ""
        if self.state == "waiting" and self.waiting_for:
            return f"waiting for {self.waiting_for}"
        return ""

    @property
    def retryable(self) -> bool:
        """Its status is one a fleet run measures again (interference, or unfinished)."""
        return self.state in RETRY_STATUSES

    def to_json(self) -> dict:
        """The record as JSON (``ok`` included for readers of the index)."""
        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_json(cls, data: dict) -> RunRecord:
        """The inverse of :meth:`to_json`."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class FleetResult:
    """Every run of a fleet run, and the devices that went away."""

    lab: str
    runs: list[RunRecord]
    unreachable: dict[str, str] = field(default_factory=dict)
    started_unix: float = 0.0
    finished_unix: float = 0.0
    notes: dict = field(default_factory=dict)
    """Extra facts for the index (re-qualification: what changed, what was left alone)."""

    def exit_code(self) -> int:
        """0 every run qualified; 3 any device or transport failure; else 1."""
        if any(r.state in ("error", "skipped") for r in self.runs) or self.unreachable:
            return 3
        return 0 if all(r.ok for r in self.runs) else 1

    def to_json(self) -> dict:
        """The index: lab, times, devices that went away, every run."""
        return {
            "lab": self.lab,
            "started_unix": self.started_unix,
            "finished_unix": self.finished_unix,
            "host": holder_name(),
            "unreachable": self.unreachable,
            "passed": self.exit_code() == 0,
            "runs": [r.to_json() for r in self.runs],
            **self.notes,
        }


def run_file_stem(model: str, device: str) -> str:
    """The file name stem of one run's report and page: ``MODEL@DEVICE``."""
    return f"{model}@{device}"
