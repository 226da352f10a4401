"""``qualify MODEL --baseline REPORT --repeat-until-decided N``: run the candidate and the
baseline's own artifacts (found by their digests) interleaved on one board until
SAME / DIFFERENT (host/judge/verdict.py) decides their clean p50s, or N pairs are spent.

``fleet run --baseline DIR --repeat-until-decided N`` runs the same loop on each cell whose
gate against its baseline is UNKNOWN (host/lab/fleet.py); :func:`repeat_check` is the
gate's check it decides.

Each pair is one qualification of each, the order alternating (baseline first, then
candidate first, …) so a board that drifts during the pairs drifts on both sides alike.
The figure compared is each run's clean p50 of its first input shape (run_figures.py: a
qualification of a ``--repeat N`` plan adds its N runs): one value per run, so the verdict
weighs run-to-run spread, never one run's calls. The spread is the pairs' own (and the
board's history noise when given), so the first pair alone is UNKNOWN unless history
knows the board; at least two pairs are run before a verdict stops the loop.

Deciding after every pair looks at the data up to N times, and each look is a chance of a
false DIFFERENT (or SAME): each look's tests run at the policy's levels divided by the
looks that can decide (Bonferroni), so over the whole loop the rates stay within
``alpha_different`` and ``alpha_same``. SAME can decide from the second pair on. DIFFERENT
from the pairs' own spread needs the runs' split too (verdict.py), which no fewer than
:func:`split_min_runs` pairs can reach at a look's level: only those looks count, so N = 7
tests DIFFERENT at 0.01 / 2 from the sixth pair on, and N = 3 never reaches DIFFERENT
(:func:`different_level`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgequal.contract.artifacts import file_sha256

from ..errors import UsageError
from .check_kit import RUN_MORE_ADVICE, Check
from .run_figures import run_figures
from .verdict import Spread, split_min_runs


@dataclass
class RepeatResult:
    """The pairs run, the p50 of each side, and the verdict after the last pair."""

    baseline_p50_ms: list[float] = field(default_factory=list)
    candidate_p50_ms: list[float] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)
    verdict: dict | None = None
    baseline_runs: list[str] = field(default_factory=list)
    candidate_runs: list[str] = field(default_factory=list)

    @property
    def pairs(self) -> int:
        """Pairs run (qualifications of each side)."""
        sides = [r["side"] for r in self.reports]
        return min(sides.count("baseline"), sides.count("candidate"))

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return {
            "pairs": self.pairs,
            "baseline_p50_ms": self.baseline_p50_ms,
            "candidate_p50_ms": self.candidate_p50_ms,
            "baseline_runs": self.baseline_runs,
            "candidate_runs": self.candidate_runs,
            "reports": self.reports,
            "verdict": self.verdict,
        }


def baseline_artifact(
    digest: str, name: str, where: Sequence[Path], flag: str, whose: str = "the baseline's"
) -> Path:
    """The file whose sha256 is ``digest``: the one given (checked), else ``name`` in one of
    ``where`` (files, or folders: the baseline report's folder, the candidate's);
    UsageError when none is (``whose`` names the report it belongs to in the message)."""
    for folder in where:
        path = Path(folder)
        candidates = [path] if path.is_file() else [path / name]
        for p in candidates:
            if p.is_file() and file_sha256(p) == digest:
                return p
    raise UsageError(
        f"{whose} {name} (sha256 {digest[:12]}) is not found by its digest",
        hint=f"give the file with {flag}",
    )


def baseline_artifacts(
    subjects: list[dict],
    where: Sequence[Path],
    model_file: Path | None = None,
    golden_file: Path | None = None,
) -> tuple[Path, Path | None]:
    """The baseline report's model and golden set (None when it had none), found by the
    digests of its subjects in ``where`` or given (``model_file``, ``golden_file``: checked)."""
    roles = {s.get("role") or ("model" if i == 0 else None): s for i, s in enumerate(subjects)}
    if not roles.get("model"):
        raise UsageError("the baseline report names no model among its subjects")
    model = baseline_artifact(
        roles["model"]["sha256"],
        roles["model"]["name"],
        [model_file] if model_file else where,
        "--baseline-model",
    )
    golden = None
    if roles.get("golden"):
        golden = baseline_artifact(
            roles["golden"]["sha256"],
            roles["golden"]["name"],
            [golden_file] if golden_file else where,
            "--baseline-golden",
        )
    return model, golden


def repeat_decision(verdict: dict) -> bool | None:
    """What a repeated comparison's verdict means for a gate: True SAME or DIFFERENT and
    faster, False DIFFERENT and slower (a regression), None still UNKNOWN."""
    if verdict["verdict"] == "DIFFERENT":
        return not (verdict["ratio"] is not None and verdict["ratio"] > 1.0)
    if verdict["verdict"] == "SAME":
        return True
    return None


def repeat_check(name: str, result: RepeatResult, where: str) -> Check:
    """The gate's baseline latency check decided by ``result`` (the pairs run on ``where``):
    PASS, FAIL, or still not judged (``retry``) when N pairs left it UNKNOWN."""
    v = result.verdict or {}
    passed = repeat_decision(v) if v else None
    limit = f"not DIFFERENT and ≥ {v.get('min_effect', 0):.0%} slower"
    ratio = "" if v.get("ratio") is None else f" ×{v['ratio']:.3f}"
    basis = f"{result.pairs} pairs, {v['basis']}" if v.get("basis") else f"{result.pairs} pairs"
    measured = f"{v.get('verdict', 'UNKNOWN')}{ratio} ({basis})"
    median = sorted(result.candidate_p50_ms)[len(result.candidate_p50_ms) // 2]
    base_median = sorted(result.baseline_p50_ms)[len(result.baseline_p50_ms) // 2]
    text = (
        f"{result.pairs} pairs run interleaved on {where}: p50 {median:.4g} ms vs the "
        f"baseline's artifacts' {base_median:.4g} ms (medians); {v.get('text') or v.get('why')}"
    )
    if passed is None:
        return Check(
            name,
            "baseline",
            False,
            limit,
            measured,
            f"{text}; still not decided: {RUN_MORE_ADVICE}",
            retry=True,
            judged=False,
        )
    return Check(
        name,
        "baseline",
        passed,
        limit,
        measured,
        text + ("" if passed else ", beyond the minimum effect: a regression"),
    )


def different_level(alpha: float, max_pairs: int, prior: Spread | None) -> float:
    """Each look's DIFFERENT level over at most ``max_pairs`` pairs: ``alpha`` over the looks
    that can decide it. With the board's history every look from the first can; from the
    pairs' own spread, only those from ``split_min_runs(level)`` pairs on, so the level is
    the largest ``alpha / L`` whose deciding looks number at most L."""
    if prior is not None:
        return alpha / max_pairs
    for looks in range(1, max_pairs + 1):
        if max_pairs - split_min_runs(alpha / looks) + 1 <= looks:
            return alpha / looks
    return alpha / max_pairs


def repeat_until_decided(
    run: Callable[[str], dict],
    max_pairs: int,
    min_effect: float,
    settings: dict | None = None,
    on_pair: Callable[[RepeatResult], None] = lambda r: None,
    prior: Spread | None = None,
) -> RepeatResult:
    """Run pairs through ``run(side)`` (``"baseline"`` or ``"candidate"``: one qualification,
    returning ``{"predicate", "path"}``) until the verdict is SAME or DIFFERENT or
    ``max_pairs`` are spent; ``prior``: the board's spread from history, if known."""
    from .verdict import UNKNOWN, VERDICT_DEFAULTS, decide

    if max_pairs < 1:
        raise UsageError(f"--repeat-until-decided needs at least 1 pair, got {max_pairs}")
    # SAME can decide from the second pair on (the first, too, with a prior).
    looks = max_pairs if prior is not None else max(max_pairs - 1, 1)
    levels = {
        **VERDICT_DEFAULTS,
        **{k: v for k, v in (settings or {}).items() if k in VERDICT_DEFAULTS},
    }
    per_look = {
        **(settings or {}),
        "alpha_same": levels["alpha_same"] / looks,
        "alpha_different": different_level(levels["alpha_different"], max_pairs, prior),
    }
    result = RepeatResult()
    for i in range(max_pairs):
        order = ("baseline", "candidate") if i % 2 == 0 else ("candidate", "baseline")
        for side in order:
            done = run(side)
            runs = run_figures(done["predicate"], "p50_ms")
            if not runs.values:
                raise UsageError(
                    f"the {side} run {done['predicate'].get('run_id')} measured no latency "
                    f"({done['predicate'].get('status')}: {done['predicate'].get('reason')})"
                )
            base = side == "baseline"
            (result.baseline_p50_ms if base else result.candidate_p50_ms).extend(runs.values)
            (result.baseline_runs if base else result.candidate_runs).extend(runs.run_ids)
            result.reports.append(
                {"side": side, "path": str(done["path"]), "p50_ms": runs.median,
                 "runs": runs.to_json()}
            )  # fmt: skip
        verdict = decide(
            result.baseline_p50_ms,
            result.candidate_p50_ms,
            min_effect,
            per_look,
            prior=prior,
            baseline_runs=result.baseline_runs,
            candidate_runs=result.candidate_runs,
            interleaved=True,
        )
        result.verdict = verdict.to_json()
        on_pair(result)
        if verdict.verdict != UNKNOWN and result.pairs >= 2:
            break
    return result
