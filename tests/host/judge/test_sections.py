"""Gate sections declared once, beside their checks (``host/judge/sections.py``): the policy's
keys and JSON, the gate's evaluation and the claims' sample sizes read that one list, so a
new section is its declaration and its entry in the list, and nothing else.

The new section here (``[warmup]``) is declared in this test module, built from the real
check kit, and judged by the real parser and the real gate on a signed report.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from edgequal.host.devices.trust import KnownDevices
from edgequal.host.errors import UsageError
from edgequal.host.judge import check_kit
from edgequal.host.judge.check_kit import BOOL, INTEGER, Check, GateSection, limit_check
from edgequal.host.judge.gate import GATE_SECTIONS, evaluate, run_gate
from edgequal.host.judge.policy import SCHEMA, SUSTAINED_SECTIONS, TOP_LEVEL, parse_policy
from edgequal.host.judge.report_file import read_report_bytes
from edgequal.host.judge.sections import SECTIONS

JUDGE = Path(check_kit.__file__).parent


# ---------------------------------------------------------------------------
# A section the house does not have, declared the way every section is


def warmup_checks(results: dict, policy) -> list[Check]:
    """``[warmup]``: the warm-up's runs (``results.warmup.runs_ms``) and whether it steadied."""
    limits = policy.warmup
    warmup = results.get("warmup") or {}
    checks = []
    if "max_runs" in limits:
        runs = warmup.get("runs_ms")
        checks.append(
            limit_check(
                "warmup",
                "warmup.max_runs",
                "warm-up runs",
                None if runs is None else len(runs),
                limits["max_runs"],
                "max",
            )
        )
    if limits.get("require_steady"):
        steady = bool(warmup.get("steady"))
        checks.append(
            Check("warmup.require_steady", "warmup", steady, "steady", str(steady), "warm-up")
        )
    return checks


def warmup_runs(results: dict, check: Check) -> int | None:
    return len((results.get("warmup") or {}).get("runs_ms") or []) or None


WARMUP = GateSection(
    "warmup",
    keys={"max_runs": INTEGER, "require_steady": BOOL},
    checks=warmup_checks,
    sample_size=warmup_runs,
)
WITH_WARMUP = (*SECTIONS, WARMUP)


def _predicate(runs_ms: list[float], steady: bool) -> dict:
    return {
        "run_id": "20261207T120000Z-0000000b",
        "nonce": "0" * 32,
        "status": "passed",
        "results": {"warmup": {"runs_ms": runs_ms, "steady": steady}},
        "findings": [],
    }


def test_a_new_section_is_its_declaration_and_its_entry(sign):
    """The parser takes its keys and their kinds, the gate runs its checks after the house's,
    the claims carry its threshold and sample size: no other list names it."""
    data = {"name": "warm", "warmup": {"max_runs": 12, "require_steady": True}}
    policy = parse_policy(data, "warm.toml", sections=WITH_WARMUP)
    assert policy.warmup == {"max_runs": 12, "require_steady": True}
    assert policy.to_json()["warmup"] == {"max_runs": 12, "require_steady": True}
    assert policy.sha256 != parse_policy({"name": "warm"}, "warm.toml").sha256

    report = sign("warm", _predicate([9.0] * 15, steady=True))
    result = run_gate(read_report_bytes(report), policy, known=KnownDevices())
    assert [c.name for c in result.checks] == [
        "verify",
        "status",
        "warmup.max_runs",
        "warmup.require_steady",
    ]
    assert not result.passed and result.failed_checks[0].name == "warmup.max_runs"
    assert result.failed_checks[0].message == "warm-up runs 15 is above the limit ≤ 12"
    claim = next(c for c in result.claims if c["metric"] == "warmup.max_runs")
    assert claim == {
        "metric": "warmup.max_runs",
        "comparator": "<=",
        "threshold": 12,
        "measured": "15",
        "sampleSize": 15,
        "passed": False,
        "judged": True,
    }
    passing = evaluate(_predicate([9.0] * 10, steady=True), policy)
    assert [(c.name, c.passed) for c in passing][-2:] == [
        ("warmup.max_runs", True),
        ("warmup.require_steady", True),
    ]


def test_a_new_sections_keys_are_held_like_every_other():
    """An unknown key in it, or a value of the wrong kind, is refused in the house's words;
    the house's own sections do not know it."""
    with pytest.raises(UsageError) as e:
        parse_policy({"warmup": {"max_run": 3}}, "warm.toml", sections=WITH_WARMUP)
    assert str(e.value) == (
        "policy warm.toml: unknown key 'warmup.max_run' (did you mean 'warmup.max_runs'?)"
    )
    with pytest.raises(UsageError) as e:
        parse_policy({"warmup": {"require_steady": 1}}, "warm.toml", sections=WITH_WARMUP)
    assert str(e.value) == "policy warm.toml: 'warmup.require_steady' must be true or false, got 1"
    with pytest.raises(UsageError) as e:
        parse_policy({"warmup": {"max_runs": 3}}, "warm.toml")
    assert str(e.value).startswith("policy warm.toml: unknown key 'warmup'")


def test_a_section_only_a_sustained_phase_measures_is_refused_beside_a_short_plan():
    """``needs_sustained`` is the one place that says so: requires_plan reads it."""
    hot = GateSection("hot", keys={"max_c": INTEGER}, checks=lambda r, p: [], needs_sustained=True)
    with pytest.raises(UsageError) as e:
        parse_policy({"requires_plan": "quick", "hot": {"max_c": 80}}, sections=(*SECTIONS, hot))
    assert "[hot] limits need a sustained phase, which plan quick does not run" in str(e.value)
    assert parse_policy({"requires_plan": "soak", "hot": {"max_c": 80}}, sections=(*SECTIONS, hot))


# ---------------------------------------------------------------------------
# The house's sections: each declared once, beside its checks; every list derived


def test_every_section_is_declared_once_in_the_module_of_its_checks():
    names = [s.name for s in SECTIONS]
    assert len(names) == len(set(names))
    for section in SECTIONS:
        if section.checks is None:
            continue
        module = importlib.import_module(section.checks.__module__)
        assert section in vars(module).values(), f"{section.name}: not beside its checks"
        assert section.reads in ("results", "predicate")


def test_the_policy_and_the_gate_derive_their_lists_from_the_sections():
    assert list(SCHEMA) == ["", *(s.name for s in SECTIONS)]
    assert SCHEMA[""] == TOP_LEVEL
    assert tuple((s.name, s.checks) for s in SECTIONS if s.checks) == GATE_SECTIONS
    assert SUSTAINED_SECTIONS == ("sustained", "energy")
    # Sections the gate reads elsewhere: against a baseline, over the history.
    assert [s.name for s in SECTIONS if s.checks is None] == ["changes", "baseline"]
    assert {s.name for s in SECTIONS if s.sample_size} == {
        "cold_load",
        "latency",
        "sustained",
        "drift",
        "accuracy",
    }
    policy = parse_policy({})
    assert list(policy.to_json())[2:] == [s.name for s in SECTIONS]


def section_spellings(source: str, names: set[str]) -> list[str]:
    """Where ``source`` spells a section as the lists this registry replaced did: compared
    with (``check.section == "latency"``), listed (``("status", status_checks)``,
    ``("sustained", "energy")``), keyed to a table (``"accuracy": {...}``), read from a
    table of sections (``sections.get("accuracy", {})``). A report's JSON field of the
    same name (``pred.get("status")``, ``{"status": self.status}``) is not one."""
    found = []

    def named(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += [f"{where}: compared with {i.value!r}" for i in items if named(i)]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            found += [f"{where}: listed {i.value!r}" for i in node.elts if named(i)]
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if named(key) and isinstance(value, (ast.Dict, ast.Call)):
                    found.append(f"{where}: a table keyed {key.value!r}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and re.search(r"section|limit", ast.unparse(node.func.value))
            and node.args
            and named(node.args[0])
        ):
            found.append(f"{where}: read {node.args[0].value!r}")
    return found


def test_the_policy_the_gate_and_the_claims_name_no_section():
    """They read the sections' declarations; a section's name spelled in one of them would
    be a second place to keep up (before the registry, each spelled most of them)."""
    names = {s.name for s in SECTIONS}
    for module in ("policy.py", "gate.py", "claims.py"):
        assert section_spellings((JUDGE / module).read_text(), names) == [], module


def test_the_spelling_finder_finds_the_lists_the_sections_replaced():
    """The finder on the shapes those modules had: each one found."""
    before = """
SUSTAINED_SECTIONS = ("sustained", "energy")
GATE_SECTIONS = (("status", status_checks), ("accuracy", accuracy_checks))
SCHEMA = {"accuracy": {"max_drop": NUMBER}, "memory": dict(LIMITS)}
if check.section == "accuracy":
    pass
Policy(accuracy=sections.get("accuracy", {}))
"""
    found = section_spellings(before, {s.name for s in SECTIONS})
    assert sorted(found) == [
        "line 2: listed 'energy'",
        "line 2: listed 'sustained'",
        "line 3: listed 'accuracy'",
        "line 3: listed 'status'",
        "line 4: a table keyed 'accuracy'",
        "line 4: a table keyed 'memory'",
        "line 5: compared with 'accuracy'",
        "line 7: read 'accuracy'",
    ]
    after = 'out = {"status": self.status}\nstatus = pred.get("status")\n'
    assert section_spellings(after, {s.name for s in SECTIONS}) == []


def test_every_section_has_its_rows_in_the_gating_doc():
    doc = (JUDGE.parents[1] / "docs" / "gating.md").read_text()
    for section in SECTIONS:
        assert f"\n| `{section.name}` | " in doc, section.name


def test_the_changes_section_holds_the_keys_the_lab_reads():
    """``[changes]`` is declared beside the registry (its reader, ``host/lab/changes.py``, is
    one the judge may not import): the two keep the same keys."""
    from edgequal.host.judge.sections import CHANGES
    from edgequal.host.lab.changes import ChangeSettings

    assert set(CHANGES.keys) == set(ChangeSettings.KEYS)
