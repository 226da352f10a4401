"""``qualify MODEL --baseline REPORT --repeat-until-decided N``: run the candidate and the
baseline's own artifacts (found by their digests) interleaved on one board until
SAME / DIFFERENT (host/judge/verdict.py) decides their clean p50s, or N pairs are spent.

Each pair is one run of each, the order alternating (baseline first, then candidate first,
…) so a board that drifts during the pairs drifts on both sides alike. The figure compared
is each run's clean p50 of its first input shape: one value per run, so the verdict
weighs run-to-run spread, not one run's samples. Mann–Whitney and Kolmogorov–Smirnov
cannot reach p ≤ 0.01 on fewer than 5 values a side: DIFFERENT needs at least 5 pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgequal.contract.artifacts import file_sha256
from edgequal.contract.preemption import decisive_summary

from ..errors import UsageError


@dataclass
class RepeatResult:
    """The pairs run, the p50 of each side, and the verdict after the last pair."""

    baseline_p50_ms: list[float] = field(default_factory=list)
    candidate_p50_ms: list[float] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)
    verdict: dict | None = None

    @property
    def pairs(self) -> int:
        """Pairs run."""
        return min(len(self.baseline_p50_ms), len(self.candidate_p50_ms))

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return {
            "pairs": self.pairs,
            "baseline_p50_ms": self.baseline_p50_ms,
            "candidate_p50_ms": self.candidate_p50_ms,
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


def first_p50_ms(predicate: dict) -> float | None:
    """A report's clean p50 of its first input shape (ms), or None."""
    shapes = ((predicate.get("results") or {}).get("latency") or {}).get("per_shape") or []
    if not shapes:
        return None
    value = decisive_summary(shapes[0]).get("p50_ms")
    return float(value) if isinstance(value, (int, float)) else None


def repeat_until_decided(
    run: Callable[[str], dict],
    max_pairs: int,
    min_effect: float,
    settings: dict | None = None,
    on_pair: Callable[[RepeatResult], None] = lambda r: None,
) -> RepeatResult:
    """Run pairs through ``run(side)`` (``"baseline"`` or ``"candidate"``: one qualification,
    returning ``{"predicate", "path"}``) until the verdict is SAME or DIFFERENT or
    ``max_pairs`` are spent."""
    from .verdict import UNKNOWN, decide

    if max_pairs < 1:
        raise UsageError(f"--repeat-until-decided needs at least 1 pair, got {max_pairs}")
    result = RepeatResult()
    for i in range(max_pairs):
        order = ("baseline", "candidate") if i % 2 == 0 else ("candidate", "baseline")
        for side in order:
            done = run(side)
            p50 = first_p50_ms(done["predicate"])
            if p50 is None:
                raise UsageError(
                    f"the {side} run {done['predicate'].get('run_id')} measured no latency "
                    f"({done['predicate'].get('status')}: {done['predicate'].get('reason')})"
                )
            (result.baseline_p50_ms if side == "baseline" else result.candidate_p50_ms).append(p50)
            result.reports.append({"side": side, "path": str(done["path"]), "p50_ms": p50})
        verdict = decide(result.baseline_p50_ms, result.candidate_p50_ms, min_effect, settings)
        result.verdict = verdict.to_json()
        on_pair(result)
        if verdict.verdict != UNKNOWN and result.pairs >= 2:
            break
    return result
