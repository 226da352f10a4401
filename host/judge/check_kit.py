"""The check kit every family of gate checks builds on: :class:`Check` (one limit, its
measured value and the message), how a limit or a flag becomes one, a limit that could not
be judged, and a latency percentile judged on the upper end of its 95 % confidence interval.
The families: ``checks.py`` (the report's own figures), ``drift_checks.py``, ``accuracy.py``,
``scenario_checks.py``, ``condition_checks.py``, ``pipeline_checks.py``,
``runtime_env_checks.py``, ``repeat_checks.py``, ``baseline.py``.
Each family declares its policy sections beside its checks (:class:`GateSection`: keys,
checks, what they read, sample size); ``sections.py`` lists them in report order.
Pure: figures in, checks out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from edgequal.contract.preemption import decided_on_clean, decisive_samples_ns

if TYPE_CHECKING:
    from .policy import Policy

PERCENTILE_KEYS = {
    "max_p50_ms": ("p50", 0.50, "p50_ms", "p50_ci_ms"),
    "max_p90_ms": ("p90", 0.90, "p90_ms", None),
    "max_p95_ms": ("p95", 0.95, "p95_ms", None),
    "max_p99_ms": ("p99", 0.99, "p99_ms", "p99_ci_ms"),
    "max_p99_9_ms": ("p99.9", 0.999, "p99_9_ms", None),
}

_MIN_SAMPLES = {"p90": 10, "p95": 20, "p99": 368, "p99.9": 3688}


@dataclass(frozen=True)
class Check:
    """One policy check: what was limited, the limit, what was measured, and why it passed or not.

    ``retry`` marks a failure explained by interference: re-run rather than fix.
    ``judged`` is False for a limit on a figure an inconclusive run did not measure: it
    neither passed nor failed (``passed`` False, ``retry`` True); see :func:`not_judged`.
    """

    name: str
    section: str
    passed: bool
    limit: str
    measured: str
    message: str
    retry: bool = False
    judged: bool = True

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


# The kinds of a policy key's value (host/judge/policy.py checks each against its kind).
NUMBER = "number"
INTEGER = "integer"
BOOL = "bool"
TEXT = "text"
TEXT_LIST = "list of strings"


@dataclass(frozen=True)
class NamedTables:
    """``[SECTION.KEY.NAME]``: one table of limits per NAME (an output, an edge shape's
    label), beside the section's own keys."""

    key: str
    """The section's key holding them (``outputs``)."""
    attribute: str
    """The :class:`~.policy.Policy` attribute that reads them (``drift_outputs``)."""
    keys: dict[str, str]
    """Each table's keys and their kinds."""
    what: str
    """What a NAME is, in the error when KEY is not a table (``outputs``)."""
    placeholder: str
    """How the list of valid keys spells a NAME (``NAME``, ``LABEL``)."""


@dataclass(frozen=True)
class GateSection:
    """One policy section, declared once beside its checks; ``sections.py`` lists them in
    the order a gate reports them, and the policy's keys, its JSON, the gate's evaluation
    and the claims' sample sizes all read that list."""

    name: str
    """The TOML table (``[accuracy]``), the checks' ``section`` and the Policy attribute."""
    keys: dict[str, str]
    """Each key and its kind (:data:`NUMBER`, :data:`BOOL`...); any other key is refused."""
    checks: Callable[[dict, Policy], list[Check]] | None = None
    """Its checks on a verified report; None for a section the gate reads elsewhere
    (``[baseline]``: against a baseline report) or that only configures (``[changes]``)."""
    reads: str = "results"
    """What ``checks`` takes: the predicate's ``results``, or the whole ``predicate``."""
    sample_size: Callable[[dict, Check], int | None] | None = None
    """How many measurements a check's figure rests on, from the report's results."""
    needs_sustained: bool = False
    """Its figures only a sustained phase measures: not checked when the plan lacks one,
    and refused beside a ``requires_plan`` without one."""
    named: NamedTables | None = None
    """Its per-NAME tables, where it has them."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """What the section holds when the policy leaves a key out (``[baseline]``)."""
    validate: Callable[[str, dict], None] | None = None
    """Rules across its values, beyond each key's kind: ``validate(where, table)`` raises
    a one-line UsageError; ``table`` holds the defaults under what the policy wrote."""


def fmt_value(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return f"{text} {unit}".rstrip() if unit else text


def not_measured(section: str, name: str, limit: str, message: str) -> Check:
    """A limit the report has nothing to judge by: it fails, and ``message`` says how to
    measure it. The one way every section reports an absent figure (measured "—")."""
    return Check(name, section, False, limit, "—", message)


def not_judged(predicate: dict, checks: list[Check]) -> list[Check]:
    """``checks`` with each limit on a figure the run did not measure marked not judged,
    when the run was inconclusive: other processes took the CPU, so the figure's absence
    (too few calls that kept it, a phase cut short) says nothing about the model, and a
    FAIL row would read as a regression. The status check says why and to re-run.
    """
    if predicate.get("status") != "inconclusive":
        return checks
    why = (predicate.get("reason") or "").removesuffix(RERUN_ADVICE).rstrip("; ")
    out = []
    for c in checks:
        if c.passed or c.measured != "—" or c.section in ("status", "plan"):
            out.append(c)
            continue
        message = (
            f"not judged: {c.message}; the run was inconclusive"
            + (f": {why}" if why else "")
            + f"; {RERUN_ADVICE}"
        )
        out.append(replace(c, message=message, retry=True, judged=False))
    return out


def section_absent(section: str, what: str, how: str) -> Check:
    """A policy section whose measurement the report lacks: ``coload: no declared co-load in
    the report (qualify with --coload …)``."""
    return not_measured(
        section, f"{section}.measured", what, f"{section}: no {what} in the report ({how})"
    )


def limit_check(
    section: str,
    name: str,
    what: str,
    value: float | None,
    limit: float,
    direction: str,
    unit: str = "",
    *,
    detail: str = "",
    retry: bool = False,
    missing: str = "not measured",
) -> Check:
    """A numeric limit: ``direction`` "max" means value <= limit passes, "min" value >= limit."""
    sign = "≤" if direction == "max" else "≥"
    limit_text = f"{sign} {fmt_value(limit, unit)}"
    if value is None:
        return not_measured(section, name, limit_text, f"{what}: {missing}")
    ok = value <= limit if direction == "max" else value >= limit
    verb = "within" if ok else ("above" if direction == "max" else "below")
    message = f"{what} {fmt_value(value, unit)} is {verb} the limit {limit_text}"
    if detail:
        message += f" ({detail})"
    return Check(name, section, ok, limit_text, fmt_value(value, unit), message, retry and not ok)


def flag_check(section: str, name: str, what: str, bad: bool, message: str, retry=False) -> Check:
    return Check(
        name,
        section,
        not bad,
        "no",
        fmt_value(bad),
        message if bad else f"no {what}",
        retry and bad,
    )


RERUN_ADVICE = "re-run on a quiet board"
RUN_MORE_ADVICE = "run more pairs to decide (--repeat-until-decided N)"
"""What an UNKNOWN verdict against a baseline asks for (host/judge/verdict.py): neither a
pass nor a regression; re-run the candidate and the baseline's artifacts interleaved."""


def percentile_not_measured(label: str, count: int) -> str:
    """``p99 not measured: 309 samples, 368 needed``: why a percentile has no figure (the
    nearest-rank minimum of ``contract/stats.py``); the gate and the library say it."""
    need = _MIN_SAMPLES.get(label)
    return f"{label} not measured: {count} samples" + (f", {need} needed" if need else "")


def percentile_upper_ci(entry: dict, key: str) -> tuple[float | None, str, str | None]:
    """(upper 95 % CI bound in ms, detail, why missing) for one percentile limit of ``entry``.

    ``entry`` holds ``summary`` (and ``samples_ns_b64`` where the report has them): a
    latency shape, its co-load measurement, or an edge shape.
    """
    label, q, point_key, ci_key = PERCENTILE_KEYS[key]
    summary = entry.get("summary") or {}
    n = summary.get("count") or 0
    point = summary.get(point_key)
    if point is None:
        return None, "", percentile_not_measured(label, n)
    ci = summary.get(ci_key) if ci_key else None
    if ci is None and entry.get("samples_ns_b64"):
        from edgequal.contract.stats import quantile_ci

        ordered = np.sort(decisive_samples_ns(entry))
        bounds = quantile_ci(ordered, q)
        ci = None if bounds is None else [bounds[0] / 1e6, bounds[1] / 1e6]
    if not ci:
        return None, "", f"{label} {point:.4g} ms has no 95 % confidence interval ({n} samples)"
    detail = f"{label} {point:.4g} ms, 95 % CI {ci[0]:.4g}–{ci[1]:.4g} ms, n {n}"
    return float(ci[1]), detail, None


def blamed_on_interference(entry: dict) -> bool:
    """The shape's figures are not the board's: interference, and too few calls that kept
    the CPU to decide on (a shape decided on its clean calls is judged, not retried)."""
    return entry.get("cause") == "interference" and not decided_on_clean(entry)
