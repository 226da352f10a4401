"""What a fleet run makes of one cell's signed report (host/lab/fleet.py runs the cells):
the gate against the policy and the cell's baseline (its re-qualification's approved report
or ``--baseline DIR``'s), a verdict left UNKNOWN decided by pairs run again on the board,
the report's page, and its row in the history."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import HostError
from .inventory import FleetModel
from .results import RunRecord, run_file_stem

if TYPE_CHECKING:
    from ..devices.qualify import Qualification
    from ..devices.trust import KnownDevices

log = logging.getLogger(__name__)


class CellJudge:
    """Judges each cell's report of one fleet run: ``options`` the run's ``FleetOptions``,
    ``policy`` its gate policy (or None), ``pairs`` a re-qualification's approved cells,
    ``record_report(path, device, cell)`` the history's recorder (or None)."""

    def __init__(
        self,
        options,
        known: KnownDevices,
        policy,
        out: Path,
        pairs: dict | None,
        record_report: Callable | None,
        cell_prefix: str,
    ):
        self.options, self.known, self.policy, self.out = options, known, policy, out
        self.pairs, self.record_report, self.cell_prefix = pairs, record_report, cell_prefix

    def judge(
        self,
        record: RunRecord,
        path: Path,
        predicate: dict,
        resumed: bool = False,
        decide_more: Callable | None = None,
    ) -> tuple[dict, bool]:
        """Gate the report, write its page, record it in history; returns the record's final
        fields and whether to run it again: the gate failed only on interference (a gate
        whose pairs were run again is not measured again, whatever they decided).
        ``decide_more(gate, baseline, predicate, prior)`` decides a verdict left UNKNOWN against the
        baseline, or confirms a regression found against it (pairs run again), and returns
        the gate it decided.
        """
        gate = None
        verdict = None
        if self.policy is not None:
            from ..judge.gate import run_gate
            from ..judge.report_file import read_report_bytes

            baseline = self.baseline_of(record)
            envelope = read_report_bytes(path)
            prior = self.board_noise(record, envelope, path) if baseline is not None else None
            gate = run_gate(
                envelope,
                self.policy,
                name=str(path),
                known=self.known,
                device=record.device,
                baseline=read_report_bytes(baseline) if baseline is not None else None,
                baseline_name=str(baseline),
                prior=prior,
            )
            if baseline is not None and decide_more is not None:
                gate = decide_more(gate, baseline, predicate, prior)
            verdict = baseline_verdict(gate)
        page = None
        if self.options.html_pages:
            from ..judge.report_file import load_report
            from ..present.html.report import write_report_html

            page = self.out / "pages" / f"{path.stem}.html"
            rf = load_report(path, known=self.known, device=record.device)
            write_report_html(page, [rf], [gate] if gate is not None else [])
        if self.record_report is not None and not resumed:
            from .history import FleetCell

            cell = FleetCell(
                record.model, f"{self.cell_prefix}/{record.model}/{record.device}", record.attempts
            )
            try:
                self.record_report(path, record.device, cell)
            except HostError as e:
                log.warning("history: %s", e)
        fields = dict(
            state=predicate["status"],
            status=predicate["status"],
            run_id=predicate.get("run_id"),
            report=str(path.relative_to(self.out)),
            page=str(page.relative_to(self.out)) if page else None,
            resumed=resumed,
            gate_passed=None if gate is None else gate.passed,
            gate_summary=None if gate is None else gate.summary,
            error=None,
            reason=predicate.get("reason"),
            baseline_verdict=verdict,
        )
        repeated = gate is not None and "repeat" in (gate.baseline or {})
        return fields, gate is not None and not gate.passed and gate.retry and not repeated

    def board_noise(self, record: RunRecord, envelope: bytes, path: Path):
        """The spread two nights of this cell fall apart by: the noise score of its board ×
        model × preset in the lab's history (the runs recorded before this one), as
        ``gate --history`` reads it; None without a history or enough recorded runs. Two
        reports made apart are judged by it (host/judge/verdict.py ``apart_se``)."""
        history = getattr(self.record_report, "history", None)
        if history is None:
            return None
        from ..judge.report_file import decoded_report
        from .board_noise import noise_for_report, noise_spread

        report = decoded_report(envelope, path, "verified by the gate")
        if report is None or not report.subjects:
            return None
        preset = (report.predicate.get("plan") or {}).get("preset")
        score = noise_for_report(
            history, record.device, report.subjects[0]["sha256"], preset,
            self.policy.baseline["min_effect"],
        )  # fmt: skip
        return noise_spread(score)

    def baseline_of(self, record: RunRecord) -> Path | None:
        """The report a run is gated against: its re-qualification's approved report, else
        its cell's in ``--baseline DIR`` (``reports/MODEL@DEVICE.json`` or ``MODEL@DEVICE.json``)."""
        fixed = (self.pairs or {}).get((record.model, record.device))
        if fixed is not None:
            return fixed.baseline
        if self.options.baseline_dir is None:
            return None
        name = f"{run_file_stem(record.model, record.device)}.json"
        for path in (
            self.options.baseline_dir / "reports" / name,
            self.options.baseline_dir / name,
        ):
            if path.is_file():
                return path
        return None

    def repeat_until_decided(
        self,
        gate,
        baseline: Path,
        predicate: dict,
        model: FleetModel,
        device: str,
        attempt: Callable[[FleetModel], tuple[Qualification, Path]],
        on_pair: Callable,
        prior=None,
    ):
        """The gate of a run whose verdict against ``baseline`` is UNKNOWN, or a regression
        (two reports made apart: a slow session reads the same), decided by pairs
        of the candidate and the baseline's own artifacts (found by digest beside the
        baseline report or the model) run interleaved on this board (``repeat_pairs`` at
        most; host/judge/repeat.py), each pair's runs by ``attempt(model)`` (its qualification
        and report file). Their reports go to ``repeats/MODEL@DEVICE/``; they
        are not the cell's report and not recorded in history. ``prior``: the board's noise
        from the lab's history (:meth:`board_noise`), which lets the pairs decide from the
        first (without it, DIFFERENT from the pairs' own spread needs six or seven)."""
        from dataclasses import replace

        from ..judge.gate import decided_by_repeat, undecided_against_baseline
        from ..judge.repeat import baseline_artifacts, repeat_check, repeat_until_decided
        from ..judge.report_file import load_report

        undecided = undecided_against_baseline(gate)
        if undecided is None or self.options.repeat_pairs < 1:
            return gate
        try:
            base = load_report(baseline, known=self.known, require=True)
            base_model, base_golden = baseline_artifacts(
                base.subjects, [baseline.parent, model.path.parent]
            )
        except HostError as e:
            why = f"{undecided.message}; not run again: {e}"
            return decided_by_repeat(
                gate, replace(undecided, message=why), {"error": str(e)}, predicate, self.policy
            )
        sides = {
            "candidate": model,
            "baseline": replace(model, path=base_model, golden=base_golden, signature=None),
        }
        folder = self.out / "repeats" / run_file_stem(model.name, device)
        folder.mkdir(parents=True, exist_ok=True)
        done: list[Path] = []

        def run(side: str) -> dict:
            outcome, tmp = attempt(sides[side])
            path = folder / f"{len(done) + 1:02d}-{side}.json"
            tmp.replace(path)
            done.append(path)
            return {"predicate": outcome.report.predicate, "path": path}

        settings = self.policy.baseline
        try:
            result = repeat_until_decided(
                run, self.options.repeat_pairs, settings["min_effect"], settings, on_pair, prior
            )
        except HostError as e:  # the board went away or a run measured nothing
            why = f"{undecided.message}; running pairs again stopped: {e}"
            return decided_by_repeat(
                gate, replace(undecided, message=why), {"error": str(e)}, predicate, self.policy
            )
        check = repeat_check(undecided.name, result, device)
        return decided_by_repeat(gate, check, result.to_json(), predicate, self.policy)


def baseline_verdict(gate) -> str | None:
    """SAME, DIFFERENT or UNKNOWN against the baseline: the pairs' when they were run
    again, else the first shape's; None without a baseline comparison of latency."""
    baseline = gate.baseline or {}
    repeat = (baseline.get("repeat") or {}).get("verdict")
    if repeat:
        return repeat["verdict"]
    latency = baseline.get("latency") or []
    three = latency[0].get("three_way") if latency else None
    return three["verdict"] if three else None
