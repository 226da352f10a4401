"""``edgequal gate``: judge a verified report against a policy and, optionally, a baseline.

Every limit in the policy becomes one :class:`Check` with its limit, the measured
value and a message, so a pipeline can say why it failed. The report is verified
first: one that does not verify fails the gate before any figure is read. Latency
percentiles are judged on the upper end of their 95 % confidence interval, so a
lucky run cannot pass a limit its own data does not support.

Against a baseline, latency is decided run against run by the three-way verdict
(host/judge/verdict.py, on each run's clean p50): DIFFERENT and slower beyond the minimum effect fails, SAME
passes, UNKNOWN is not judged and asks to run more (``retry``; ``qualify`` and ``fleet
run`` with ``--repeat-until-decided N``). The bootstrap interval of the median ratio is
shown beside it. What changed in the fingerprint (firmware, kernel, runtime, power mode,
governor, clocks) is listed beside the verdict, because that is usually the reason.

An ``inconclusive`` report (a drop explained by interference from other processes)
fails with ``retry``: re-run it on a quiet board; it is not a regression. A limit on a
figure such a run did not measure is not judged (no FAIL; ``judged`` false).

A policy that names the plan it needs (``requires_plan``) fails a report from a plan
without that plan's sustained phase with one check naming both plans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..devices.trust import KnownDevices
from ..errors import VerificationFailed
from .baseline import SECTION as BASELINE
from .baseline import baseline_checks
from .check_kit import RERUN_ADVICE, RUN_MORE_ADVICE, Check, not_judged
from .checks import plan_checks
from .claims import claims
from .policy import Policy
from .provenance_checks import commitment, commitment_checks, model_signature_checks
from .report_file import ReportFile, report_of
from .sections import SECTIONS
from .verdict import Spread


@dataclass
class GateResult:
    """The verdict on one report. True when it verified and every check passed."""

    report: str
    policy: str
    verified: bool
    signature: str
    checks: list[Check] = field(default_factory=list)
    run_id: str | None = None
    status: str | None = None
    reason: str | None = None
    device: str | None = None
    baseline: dict | None = None
    # Whether the run committed to this policy before it ran (host/judge/claims.py), and
    # every check as a claim (metric, comparator, threshold, measured, sample size, passed).
    commitment: str | None = None
    claims: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Verified, and no check failed."""
        return self.verified and all(c.passed for c in self.checks)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failed_checks(self) -> list[Check]:
        """The checks that failed, in policy order (not those left not judged)."""
        return [c for c in self.checks if not c.passed and c.judged]

    @property
    def not_judged_checks(self) -> list[Check]:
        """Limits on figures an inconclusive run did not measure: neither passed nor failed."""
        return [c for c in self.checks if not c.judged]

    @property
    def retry(self) -> bool:
        """Failed only because of interference: re-run on a quiet board; not a regression.
        A limit left not judged is such a reason too."""
        failed = self.failed_checks
        return (
            self.verified
            and bool(failed or self.not_judged_checks)
            and all(c.retry for c in failed)
        )

    @property
    def summary(self) -> str:
        """One line: the verdict and the first reason."""
        if self.passed:
            return f"gate passed: {len(self.checks)} checks of policy '{self.policy}'"
        failed = self.failed_checks or self.not_judged_checks
        first = failed[0].message if failed else self.signature
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        if self.retry and all(RUN_MORE_ADVICE in c.message for c in failed):
            return f"gate not decided, {RUN_MORE_ADVICE}: {first}{more}; exit 1 until they decide"
        if self.retry:
            # Interference, not the model: neither a pass nor a regression. The exit code
            # stays 1 (docs/gating.md), and the line says so and what decides it.
            if first.startswith("inconclusive: "):
                first = "the run was inconclusive: " + first.removeprefix("inconclusive: ")
            elif RERUN_ADVICE not in first:
                first = f"{first}; {RERUN_ADVICE} (interference, not a regression)"
            return f"gate not decided: {first}{more}; exit 1 until a run decides it"
        return f"gate failed: {first}{more}"

    def to_json(self) -> dict:
        """The verdict as JSON: passed, retry, every check, the baseline comparison."""
        return {
            "report": self.report,
            "policy": self.policy,
            "passed": self.passed,
            "retry": self.retry,
            "summary": self.summary,
            "verified": self.verified,
            "signature": self.signature,
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "device": self.device,
            "checks": [c.to_json() for c in self.checks],
            "baseline": self.baseline,
            "policy_commitment": self.commitment,
            "claims": self.claims,
        }


# Each section that has checks, and its checks, in the order a gate reports them
# (sections.py; each declared beside its checks). A section that needs the sustained phase
# is not checked when the plan lacks it.
GATE_SECTIONS: tuple[tuple[str, Callable[[dict, Policy], list[Check]]], ...] = tuple(
    (s.name, s.checks) for s in SECTIONS if s.checks is not None
)


def evaluate(predicate: dict, policy: Policy) -> list[Check]:
    """Every check of ``policy`` on a verified predicate, its sections in report order.

    When the report's plan lacks the sustained phase ``requires_plan`` needs, that is
    one failed check, and the limits only that phase measures (sustained, energy) are not
    checked.
    """
    results = predicate.get("results") or {}
    checks = plan_checks(predicate, policy)
    short = any(not c.passed for c in checks)
    checks += commitment_checks(predicate, policy)
    checks += model_signature_checks(results, policy)
    for section in policy.sections:
        if section.checks is None or (short and section.needs_sustained):
            continue
        checks += section.checks(predicate if section.reads == "predicate" else results, policy)
    return not_judged(predicate, checks)


# ---------------------------------------------------------------------------
# The gate


def run_gate(
    report: bytes,
    policy: Policy,
    *,
    name: str = "report",
    known: KnownDevices | None = None,
    device: str | None = None,
    baseline: bytes | None = None,
    baseline_name: str = "baseline",
    prior: Spread | None = None,
) -> GateResult:
    """Verify the report's envelope bytes, then every check of the policy (and the
    baseline's, when given). ``name`` (and ``baseline_name``) is the file the bytes came
    from, or what to call them: the result's ``report``. ``prior``: the board's run-to-run
    spread from history (``gate --history``), which the baseline verdict assumes.

    A report that does not verify gives a failed result with no checks read from it.
    """
    known = known if known is not None else KnownDevices()
    try:
        cand = report_of(report, name, known=known, device=device, require=True)
    except VerificationFailed as e:
        return GateResult(
            name,
            policy.name,
            False,
            f"NOT VERIFIED: {e}",
            [
                Check(
                    "verify",
                    "verify",
                    False,
                    "signed by a pinned device key",
                    "not verified",
                    str(e),
                )
            ],
        )
    base = None
    if baseline is not None:
        try:
            base = report_of(baseline, baseline_name, known=known, require=True)
        except VerificationFailed as e:
            base = ReportFile(Path(baseline_name), {}, [], False, f"NOT VERIFIED: {e}")
    pred = cand.predicate
    result = GateResult(
        report=name,
        policy=policy.name,
        verified=True,
        signature=cand.signature,
        checks=[
            Check(
                "verify",
                "verify",
                True,
                "signed by a pinned device key",
                "verified",
                cand.signature,
            )
        ],
        run_id=pred.get("run_id"),
        status=pred.get("status"),
        reason=pred.get("reason"),
        device=cand.device_name,
    )
    result.checks += evaluate(pred, policy)
    if base is not None:
        checks, summary = baseline_checks(base, cand, policy, prior)
        result.checks += checks
        result.baseline = summary
    result.commitment = commitment(pred, policy)
    result.claims = claims(pred, policy, result.checks)
    return result


def undecided_against_baseline(result: GateResult) -> Check | None:
    """The first baseline latency check that pairs run again should decide, or None: one
    the verdict left UNKNOWN (not judged), else one it failed as a regression. Two reports
    made apart are two sessions; a run of one session can be 30–80 % slower in every call
    with nothing else on the board moving (docs/gating.md "Confirming a regression"), so a
    regression from them is confirmed by interleaved pairs before the gate fails on it. A
    failure the agent blamed on interference (``retry``) is run again whole instead."""
    latency = [
        c for c in result.checks
        if c.section == BASELINE.name and c.name.startswith(f"{BASELINE.name}.latency[")
    ]  # fmt: skip
    return next((c for c in latency if not c.judged), None) or next(
        (c for c in latency if not c.passed and not c.retry), None
    )


def decided_by_repeat(
    result: GateResult, check: Check, repeat: dict, predicate: dict, policy: Policy
) -> GateResult:
    """``result`` with its check of ``check``'s name replaced by ``check`` (decided by pairs
    run again, host/judge/repeat.py), the pairs (``repeat``) in its baseline summary."""
    checks = [check if c.name == check.name else c for c in result.checks]
    baseline = {**(result.baseline or {}), "repeat": repeat}
    return replace(
        result, checks=checks, baseline=baseline, claims=claims(predicate, policy, checks)
    )
