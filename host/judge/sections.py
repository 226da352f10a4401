"""The gate policy's sections, in the order a gate reports their checks: the one list that
the policy's keys and JSON (``policy.py``), the gate's evaluation (``gate.py``) and the
claims' sample sizes (``claims.py``) read.

Each section is declared once, beside its checks, as a :class:`~.check_kit.GateSection`
(its keys and their kinds, its checks, what they read, the sample size of its figures,
whether only a sustained phase measures them); a new one is its declaration in the module
of its checks and its entry here: 2 files (docs/architecture.md, "Extension points").
"""

from __future__ import annotations

from . import (
    accuracy,
    baseline,
    checks,
    condition_checks,
    drift_checks,
    pipeline_checks,
    repeat_checks,
    runtime_env_checks,
    scenario_checks,
)
from .check_kit import BOOL, INTEGER, NUMBER, GateSection

# Kinds of figure a change point is sought in (host/lab/changes.py DEFAULT_MIN_EFFECT).
_CHANGE_KINDS = (
    "latency",
    "tail",
    "throughput",
    "stability",
    "cold",
    "drift",
    "memory",
    "energy",
    "accuracy",
)

CHANGES = GateSection(
    "changes",
    keys={
        "p_value": NUMBER,
        "fail_on_machine": BOOL,
        "min_points": INTEGER,
        "permutations": INTEGER,
        "seed": INTEGER,
        "min_effect": NUMBER,
        **{f"min_effect_{kind}": NUMBER for kind in _CHANGE_KINDS},
    },
)
"""``[changes]``: the sensitivity of change points over the history, read by
``host/lab/changes.py`` (``ChangeSettings.KEYS``; ``p_value`` is refused there, it is the
lab's alone), which the judge may not import: declared here, with no checks."""

SECTIONS: tuple[GateSection, ...] = (
    checks.STATUS,
    checks.FINDINGS,
    checks.COLD_LOAD,
    checks.LATENCY,
    checks.SUSTAINED,
    drift_checks.SECTION,
    accuracy.SECTION,
    checks.MEMORY,
    scenario_checks.BATCH,
    scenario_checks.THREADS,
    scenario_checks.SERVER,
    scenario_checks.OPERATORS,
    scenario_checks.ENERGY,
    condition_checks.COLOAD,
    condition_checks.EDGE_SHAPES,
    pipeline_checks.SECTION,
    runtime_env_checks.SECTION,
    repeat_checks.SECTION,
    # Read outside the evaluation of one report: over the history, against a baseline.
    CHANGES,
    baseline.SECTION,
)
"""Every section, in report order; the gate evaluates those with checks."""
