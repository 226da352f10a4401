"""``edgequal bisect runtime``: the first runtime version, between one known good and one
known bad, at which a model got slower (``p50``) or its outputs moved (``drift``), named
with the operators that moved with it (docs/measurement.md "Bisecting a runtime version").

Every version tried is measured in one run beside the good version, as runtime
environments side by side (``qualify --runtime-env GOOD --runtime-env CANDIDATE``,
agent/phases/runtime_envs.py: ABBA cold loads and latency segments, the outputs compared
directly), so the board's state falls on both alike; the three-way verdict of
host/judge/verdict.py decides each. First the bad version itself (a regression that is not
DIFFERENT there is not reproducible, and nothing is bisected), then the middle of the
versions still in question, until the first bad one sits beside the last good one.

This module decides and orders; the CLI passes in how a version is installed and how a
run is made (``measure``), so the search itself is tested on recorded figures.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgequal.contract.runtimes import Requirement

from ..errors import HostError, UsageError
from ..judge.run_figures import segment_figures
from ..judge.runtime_envs import drift_between, env_entry, env_pair, env_shape
from ..judge.verdict import DIFFERENT, SAME, UNKNOWN, decide
from .operator_diff import operators_text, profile_diff

METRICS = ("p50", "drift")
"""What makes a version bad: a slower (or faster) clean p50 than the good version's, DIFFERENT
by the verdict; or outputs that differ from the good version's beyond the golden set's
tolerances (or a decision that flips)."""

FOUND, NOT_REPRODUCIBLE, UNDECIDED = "found", "not_reproducible", "undecided"
EXIT_CODES = {FOUND: 0, NOT_REPRODUCIBLE: 1, UNDECIDED: 1}
PIP_TIMEOUT_S = 300.0


def version_key(version: str):
    """A version's sort key (PEP 440, ``packaging``); UsageError when it is not one."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version)
    except InvalidVersion:
        raise UsageError(f"{version!r} is not a version number") from None


def parse_pins(good: str, bad: str) -> tuple[Requirement, Requirement]:
    """``--good`` and ``--bad``: exact pins of one runtime distribution, two versions."""
    g, b = Requirement.parse(good), Requirement.parse(bad)
    if g.distribution != b.distribution:
        raise UsageError(
            f"--good names {g.distribution} and --bad {b.distribution}",
            hint="bisect the versions of one runtime: --good onnxruntime==A --bad onnxruntime==B",
        )
    if version_key(g.version) == version_key(b.version):
        raise UsageError(f"--good and --bad name the same version {g.version}")
    return g, b


def versions_between(available: Iterable[str], good: str, bad: str) -> list[str]:
    """The versions from ``good`` to ``bad`` in that order (either may be the newer), both
    included: ``available`` within the range, pre-releases and dev releases left out."""
    lo, hi = sorted([version_key(good), version_key(bad)])
    inside = {}
    for v in available:
        k = version_key(v)
        if lo < k < hi and not k.is_prerelease and not k.is_devrelease:
            inside.setdefault(k, v)
    ordered = [inside[k] for k in sorted(inside)]
    if version_key(good) > version_key(bad):
        ordered.reverse()
    return [good, *ordered, bad]


def parse_version_list(text: str) -> list[str]:
    """``--versions 1.19.0,1.20.1,1.21.0``: each checked as a version number."""
    out = [v.strip() for v in text.split(",") if v.strip()]
    if not out:
        raise UsageError("--versions names no version", hint="write e.g. 1.19.0,1.20.1,1.21.0")
    for v in out:
        version_key(v)
    return out


def wheelhouse_versions(directory: Path, distribution: str) -> list[str]:
    """The versions of ``distribution`` a wheelhouse holds wheels of (read from the file
    names; no network)."""
    if not Path(directory).is_dir():
        raise UsageError(f"wheelhouse {directory} is not a directory")
    stem = re.escape(distribution.replace("-", "_"))
    pattern = re.compile(rf"^{stem}-([^-]+)-.*\.whl$", re.IGNORECASE)
    return sorted(
        {m.group(1) for p in Path(directory).iterdir() if (m := pattern.match(p.name))},
        key=version_key,
    )


def registry_versions(distribution: str, tags: dict | None = None) -> list[str]:
    """The released versions of ``distribution`` on the configured package index that have
    a wheel for the board's ``tags`` (``edgequal-agent runtime tags``; this host's without),
    as ``pip index versions`` lists them."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", distribution]
    cmd += ["--disable-pip-version-check", "--no-input", "--only-binary=:all:"]
    if tags:
        cmd += ["--python-version", str(tags["python"])]
        cmd += ["--implementation", str(tags.get("implementation") or "cp")]
        for abi in tags.get("abis") or []:
            cmd += ["--abi", abi]
        for platform in tags.get("platforms") or []:
            cmd += ["--platform", platform]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise HostError(
            f"listing {distribution}'s versions took more than {PIP_TIMEOUT_S:g} s"
        ) from e
    m = re.search(r"^Available versions:\s*(.+)$", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or m is None:
        last = (proc.stderr.strip().splitlines() or ["no versions listed"])[-1]
        raise UsageError(
            f"cannot list the versions of {distribution} from the package index: {last}",
            hint="give them with --versions A,B,C or --wheelhouse DIR (both work offline)",
        )
    return [v.strip() for v in m.group(1).split(",") if v.strip()]


@dataclass
class Trial:
    """One version measured beside the good one in one run, and the verdict on it."""

    version: str
    baseline: str
    metric: str
    figure: float | None
    baseline_figure: float | None
    ratio: float | None
    verdict: str
    why: str
    bad: bool | None = None
    report: str | None = None
    operators: list[dict] | None = None
    baseline_operators: list[dict] | None = None
    three_way: dict | None = None
    """``p50``: the verdict's fields (segments used a side, spread and its source, interval)."""

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


def _env_operators(entry: dict | None) -> list[dict] | None:
    return (((entry or {}).get("operators") or {}).get("profile") or {}).get("operators")


def judge_trial(
    predicate: dict,
    baseline_env: str,
    candidate_env: str,
    metric: str,
    settings: dict,
) -> dict:
    """The figures and verdict of ``candidate_env`` against ``baseline_env`` in one report's
    ``results.runtime_envs``: ``figure``, ``baseline_figure``, ``ratio``, ``verdict``, ``why``
    and each side's operator profile. ``p50``: the verdict (host/judge/verdict.py) on the
    two environments' segment p50s (each ABBA segment a unit; ``three_way`` its fields),
    UNKNOWN where segments waited for a CPU;
    ``drift``: DIFFERENT when the candidate's outputs differ from the baseline's beyond
    the golden set's tolerances or flip a decision, SAME when they hold."""
    results = predicate.get("results") or {}
    if "runtime_envs" not in results:
        raise HostError(
            f"run {predicate.get('run_id')} measured no runtime environments "
            f"({predicate.get('status')}: {predicate.get('reason') or 'no reason given'})"
        )
    base, cand = env_entry(results, baseline_env), env_entry(results, candidate_env)
    if base is None or base.get("status") == "failed":
        raise HostError(
            f"run {predicate.get('run_id')}: the good version's environment {baseline_env} "
            f"failed: {(base or {}).get('reason') or 'not measured'}",
        )
    out = {
        "operators": _env_operators(cand),
        "baseline_operators": _env_operators(base),
        "figure": None,
        "baseline_figure": None,
        "ratio": None,
    }
    if cand is None or cand.get("status") == "failed":
        why = (cand or {}).get("reason") or "not measured"
        return {**out, "verdict": DIFFERENT, "why": f"failed: {why}"}
    pair = env_pair(results, candidate_env) or {}
    if metric == "p50":
        a, b = env_shape(base), env_shape(cand)
        run_id = str(predicate.get("run_id") or "run")
        # The units are the ABBA segments: each alternated with the other version's in the
        # same run, so the board's drift falls on both; a segment's calls are not units.
        sa, sb = segment_figures(a, run_id), segment_figures(b, run_id)
        if not sa.values or not sb.values:
            return {**out, "verdict": UNKNOWN, "why": "no latency segments"}
        v = decide(
            sa.values,
            sb.values,
            settings["min_effect"],
            settings,
            baseline_runs=sa.run_ids,
            candidate_runs=sb.run_ids,
            split=False,  # segments of one run: they share its two workers' modes
            interleaved=True,
        )
        out.update(
            figure=float((b.get("summary") or {}).get("p50_ms") or 0) or None,
            baseline_figure=float((a.get("summary") or {}).get("p50_ms") or 0) or None,
            ratio=v.ratio,
            three_way=v.to_json(),
        )
        interference = pair.get("interference") or {}
        if not interference.get("decisive", True):
            return {
                **out,
                "verdict": UNKNOWN,
                "why": f"{interference.get('interfered')} of {interference.get('segments')} "
                "segments waited for a CPU: not decisive",
            }
        why = f"{v.why} ({v.basis()}: ABBA segments of one run, judged by the interval alone)"
        return {**out, "verdict": v.verdict, "why": why}
    between = pair.get("drift_between")
    if not between:
        return {**out, "verdict": UNKNOWN, "why": "the outputs were not compared"}
    max_abs = drift_between(pair)["drift_between_max_abs"]
    out["figure"] = max_abs
    flips = pair.get("flips_between") or 0
    if flips:
        return {**out, "verdict": DIFFERENT, "why": f"{flips} decisions flip"}
    if not between.get("passed", True):
        return {**out, "verdict": DIFFERENT, "why": "outputs beyond the golden set's tolerances"}
    if not max_abs:
        return {**out, "verdict": SAME, "why": "identical outputs"}
    return {
        **out,
        "verdict": SAME,
        "why": f"within the golden set's tolerances (max abs {max_abs:.2g})",
    }


@dataclass
class BisectResult:
    """The versions in question, every trial in the order run, and what it found."""

    distribution: str
    metric: str
    versions: list[str]
    trials: list[Trial] = field(default_factory=list)
    status: str = NOT_REPRODUCIBLE
    first_bad: str | None = None
    last_good: str | None = None
    ratio: float | None = None
    operators: list[dict] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 found, 1 not reproducible or undecided."""
        return EXIT_CODES[self.status]

    def headline(self) -> str:
        """``first bad among the versions tried: onnxruntime 1.23.0 (p50 +31 % vs 1.22.1; Conv
        +44 %, Resize +210 %); tried against 1.19.0: 1.22.1 good, 1.23.0 bad, 1.25.0 bad``, or
        why nothing was named."""
        good, bad = self.versions[0], self.versions[-1]
        if self.status == NOT_REPRODUCIBLE:
            last = self.trials[-1] if self.trials else None
            why = f"{last.verdict}: {last.why}" if last else "not measured"
            return (
                f"not reproducible: {self.distribution} {bad} is not DIFFERENT from {good} "
                f"on {self.metric} ({why})"
            )
        if self.status == UNDECIDED:
            last = self.trials[-1]
            return (
                f"undecided: the first bad {self.distribution} version is after {self.last_good} "
                f"and at most {self.first_bad}; {last.version} stayed {last.verdict} ({last.why})"
            )
        if self.metric == "p50" and self.ratio is not None:
            size = f"p50 {(self.ratio - 1.0) * 100:+.0f} % vs {self.last_good}"
        else:
            trial = next(t for t in reversed(self.trials) if t.version == self.first_bad)
            moved = (
                "outputs moved" if trial.figure is None else f"outputs moved by {trial.figure:.2g}"
            )
            size = f"{moved} vs {trial.baseline}; {trial.why}"
        ops = operators_text(self.operators)
        # Only the versions in question were tried (--versions, a wheelhouse, the index for
        # the board): a release between the last good and the first bad was not, so the
        # line names the first bad among those tried, and which were.
        return (
            f"first bad among the versions tried: {self.distribution} {self.first_bad} "
            f"({size}{'; ' + ops if ops else ''}); {self.tried_text()}"
        )

    def tried_text(self) -> str:
        """``tried against 1.19.0: 1.22.0 good, 1.32.0 bad`` (in version order), or the
        count where many were tried."""
        verdicts = {t.version: t.bad for t in self.trials if t.bad is not None}
        tried = [v for v in self.versions if v in verdicts]
        if len(tried) > 6:
            return f"{len(tried)} of the {len(self.versions) - 1} versions in question tried"
        named = ", ".join(f"{v} {'bad' if verdicts[v] else 'good'}" for v in tried)
        return f"tried against {self.versions[0]}: {named}"

    def to_json(self) -> dict:
        """JSON-ready fields, with the headline and the exit code."""
        out = asdict(self)
        out["trials"] = [t.to_json() for t in self.trials]
        out["headline"] = self.headline()
        out["exit_code"] = self.exit_code
        return out


Measure = Callable[[str, str], dict]
"""``measure(good_version, candidate_version)``: one run of both side by side, returning
``{"predicate", "path", "baseline_env", "candidate_env"}``."""


def bisect_versions(
    distribution: str,
    versions: Sequence[str],
    measure: Measure,
    metric: str,
    settings: dict,
    on_trial: Callable[[Trial], None] = lambda t: None,
    retries: int = 1,
) -> BisectResult:
    """The first bad one of ``versions`` (good first, bad last) in binary-search order; a
    trial still UNKNOWN is measured again up to ``retries`` times."""
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}", hint=f"use one of: {', '.join(METRICS)}")
    if len(versions) < 2:
        raise UsageError("bisecting needs a good and a bad version")
    result = BisectResult(distribution, metric, list(versions))
    good = versions[0]

    def trial(version: str) -> Trial:
        for _ in range(retries + 1):
            done = measure(good, version)
            judged = judge_trial(
                done["predicate"], done["baseline_env"], done["candidate_env"], metric, settings
            )
            t = Trial(version, good, metric, report=str(done.get("path") or ""), **judged)
            result.trials.append(t)
            if t.verdict != UNKNOWN:
                break
        t.bad = t.verdict == DIFFERENT and _same_way(t, reference)
        on_trial(t)
        return t

    reference = None  # the bad version's trial: which way "bad" moved
    reference = trial(versions[-1])
    if not reference.bad:
        result.status = NOT_REPRODUCIBLE
        return result
    lo, hi = 0, len(versions) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t = trial(versions[mid])
        if t.verdict == UNKNOWN:
            result.status, result.last_good, result.first_bad = (
                UNDECIDED,
                versions[lo],
                versions[hi],
            )
            return result
        if t.bad:
            hi = mid
        else:
            lo = mid
    result.status, result.last_good, result.first_bad = FOUND, versions[lo], versions[hi]
    result.ratio = _ratio_to_last_good(result.trials, result.last_good, result.first_bad, good)
    result.operators = profile_diff(
        _profiles(result.trials, result.last_good, good),
        _profiles(result.trials, result.first_bad, good),
    )
    return result


def _same_way(t: Trial, reference: Trial | None) -> bool:
    """A DIFFERENT p50 counts as bad only in the bad version's direction (a faster version
    between is not the regression); a moved output always does."""
    if reference is None or t.metric != "p50" or t.ratio is None or reference.ratio is None:
        return True
    return (t.ratio > 1.0) == (reference.ratio > 1.0)


def _ratio_to_last_good(trials: list[Trial], last_good: str, first_bad: str, good: str):
    """The first bad version's p50 over the last good one's, each taken against the good
    version measured in its own run (1 for the good version itself)."""

    def normalised(version: str) -> float | None:
        if version == good:
            return 1.0
        rel = [t.figure / t.baseline_figure for t in trials if t.version == version
               and t.figure and t.baseline_figure and t.verdict != UNKNOWN]  # fmt: skip
        return sorted(rel)[len(rel) // 2] if rel else None

    a, b = normalised(last_good), normalised(first_bad)
    return b / a if a and b else None


def _profiles(trials: list[Trial], version: str, good: str) -> list[list[dict] | None]:
    """Every operator profile measured of ``version`` (the good one is in every run)."""
    if version == good:
        return [t.baseline_operators for t in trials if t.baseline_operators]
    return [t.operators for t in trials if t.version == version and t.operators]


__all__ = [
    "METRICS",
    "BisectResult",
    "Trial",
    "bisect_versions",
    "judge_trial",
    "parse_pins",
    "parse_version_list",
    "registry_versions",
    "version_key",
    "versions_between",
    "wheelhouse_versions",
]
