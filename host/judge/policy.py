"""Gate policies: a TOML file of limits on a report's figures, loaded and validated.

Every key is checked against its section's declared keys (each section declared beside its
checks, listed in report order by ``sections.py``; :data:`SCHEMA` derives from them); an
unknown key is refused with its name and the closest valid one (a misspelt limit that were
silently ignored would pass every report). A limit left out is not checked. See
docs/gating.md for each key.

``requires_plan`` names the plan the policy's limits were written for (quick, standard
or soak): the gate fails a report whose plan lacks that plan's sustained phase with one
check saying so, rather than with every limit that phase would have measured.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgequal.contract.plan import PRESETS
from edgequal.contract.signing import STATUSES

from ..errors import UsageError
from ..toml_text import BadToml, parse_toml
from .baseline import BASELINE_DEFAULTS, SAME_FIELDS
from .check_kit import BOOL, INTEGER, NUMBER, TEXT, TEXT_LIST, GateSection
from .checks import COLD_LOAD_STATISTICS, DEFAULT_ALLOWED_STATUSES
from .condition_checks import EDGE_SHAPE_LIMITS
from .drift_checks import DRIFT_METRICS
from .pipeline_checks import PATH_PARTS
from .sections import SECTIONS

__all__ = [
    "BASELINE_DEFAULTS",
    "COLD_LOAD_STATISTICS",
    "DEFAULT_ALLOWED_STATUSES",
    "DRIFT_METRICS",
    "EDGE_SHAPE_LIMITS",
    "PATH_PARTS",
    "SAME_FIELDS",
    "SCHEMA",
    "STATUSES",
    "SUSTAINED_SECTIONS",
    "Policy",
    "load_policy",
    "parse_policy",
]

# The top level's keys: the policy itself, not a section's limits.
TOP_LEVEL: dict[str, str] = {
    "name": TEXT,
    "description": TEXT,
    "requires_plan": TEXT,
    "require_committed": BOOL,
    "require_model_signature": BOOL,
}

# Section -> key -> kind, derived from the sections (sections.py); "" is the top level.
SCHEMA: dict[str, dict[str, str]] = {"": TOP_LEVEL, **{s.name: s.keys for s in SECTIONS}}
# Sections whose figures only a sustained phase measures.
SUSTAINED_SECTIONS = tuple(s.name for s in SECTIONS if s.needs_sustained)


def _limits_left_out(sections: tuple[GateSection, ...]) -> dict[str, dict]:
    """What each section holds when the policy writes nothing in it: its defaults."""
    out: dict[str, dict] = {}
    for s in sections:
        out[s.name] = copy.deepcopy(s.defaults)
        if s.named:
            out[f"{s.name}.{s.named.key}"] = {}
    return out


@dataclass(frozen=True)
class Policy:
    """A validated gate policy: limits per section; a limit left out is absent from its dict.

    A section's limits read as an attribute of its name (``policy.latency``), its per-NAME
    tables as the attribute its declaration names (``policy.drift_outputs``)."""

    name: str
    source: str
    description: str = ""
    requires_plan: str | None = None
    # The run must have committed to this very policy before it ran (host/judge/claims.py).
    require_committed: bool = False
    # The model's signature verified on the device before it was loaded.
    require_model_signature: bool = False
    limits: dict[str, dict] = field(default_factory=lambda: _limits_left_out(SECTIONS))
    """Each section's limits by its name, each section's per-NAME tables by section and key
    (``drift.outputs``)."""
    sections: tuple[GateSection, ...] = field(default=SECTIONS, repr=False)
    """The sections it was read against, in report order (sections.py)."""
    # The sha256 of the file's bytes as read (None for a policy given as data).
    file_sha256: str | None = None

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_") or "sections" not in self.__dict__:
            raise AttributeError(attribute)
        for s in self.sections:
            if attribute == s.name:
                return self.limits.get(s.name, s.defaults)
            if s.named and attribute == s.named.attribute:
                return self.limits.get(f"{s.name}.{s.named.key}", {})
        raise AttributeError(f"'Policy' object has no attribute '{attribute}'")

    @property
    def allowed_statuses(self) -> tuple[str, ...]:
        """The statuses a report may end with (``[status] allowed``)."""
        return tuple(self.status["allowed"])

    def section(self, name: str) -> GateSection | None:
        """The declaration of section ``name``; None for one it was not read against."""
        return next((s for s in self.sections if s.name == name), None)

    @property
    def sha256(self) -> str:
        """What a run commits to and an attestation names: the file's sha256 as read, else
        that of the parsed policy's canonical JSON."""
        if self.file_sha256 is not None:
            return self.file_sha256
        from edgequal.contract.signing import canonical_json

        return hashlib.sha256(canonical_json(self.to_json())).hexdigest()

    def to_json(self) -> dict:
        """The policy as JSON (the same sections and keys as the TOML)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.requires_plan is not None:
            out["requires_plan"] = self.requires_plan
        if self.require_committed:
            out["require_committed"] = True
        if self.require_model_signature:
            out["require_model_signature"] = True
        for s in self.sections:
            out[s.name] = dict(self.limits.get(s.name, s.defaults))
            if s.named:
                tables = self.limits.get(f"{s.name}.{s.named.key}", {})
                out[s.name][s.named.key] = {k: dict(v) for k, v in tables.items()}
        return out


def _all_keys(sections: tuple[GateSection, ...]) -> list[str]:
    keys = list(TOP_LEVEL)
    keys += [f"{s.name}.{k}" for s in sections for k in s.keys]
    keys += [s.name for s in sections]
    keys += [
        f"{s.name}.{s.named.key}.{s.named.placeholder}.{k}"
        for s in sections
        if s.named
        for k in s.named.keys
    ]
    return keys


_SAME_BY_EQUIVALENCE = (
    "SAME is an equivalence test now (the ratio's 90 % interval inside ±min_effect, "
    "docs/gating.md); remove it"
)
RETIRED_KEYS = {
    "baseline.different_p": "use 'baseline.alpha_different' (the DIFFERENT test's level, 0.01)",
    "baseline.same_p_start": _SAME_BY_EQUIVALENCE,
    "baseline.same_p_n": _SAME_BY_EQUIVALENCE,
    "baseline.same_p_floor": _SAME_BY_EQUIVALENCE,
}
"""Keys a policy once had, each with what replaced it."""


def _unknown(where: str, dotted: str, candidates: list[str]) -> UsageError:
    """One line: the unknown key, and the closest valid one."""
    leaf = dotted.rsplit(".", 1)[-1]
    by_leaf = difflib.get_close_matches(leaf, [c.rsplit(".", 1)[-1] for c in candidates], 1, 0.5)
    close = difflib.get_close_matches(dotted, candidates, 1, 0.5)
    if by_leaf:
        close = [c for c in candidates if c.rsplit(".", 1)[-1] == by_leaf[0]][:1]
    guess = f"did you mean '{close[0]}'?" if close else "no similar key"
    return UsageError(
        f"policy {where}: unknown key '{dotted}' ({guess})", hint="docs/gating.md lists the keys"
    )


def _check_value(where: str, dotted: str, kind: str, value: Any) -> Any:
    def bad(expected: str) -> UsageError:
        return UsageError(
            f"policy {where}: '{dotted}' must be {expected}, got {value!r}",
            hint="see docs/gating.md",
        )

    if kind == BOOL:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if kind == INTEGER:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad("a whole number >= 0")
        return value
    if kind == NUMBER:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        if not math.isfinite(value) or value < 0:
            raise bad("a finite number >= 0")
        return float(value)
    if kind == TEXT:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if kind == TEXT_LIST:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of strings")
        return list(value)
    raise AssertionError(kind)


def _section(
    where: str, name: str, table: Any, schema: dict[str, str], sections: tuple[GateSection, ...]
) -> dict:
    if not isinstance(table, dict):
        raise UsageError(f"policy {where}: '{name}' must be a table ([{name}])")
    out = {}
    valid = [f"{name}.{k}" for k in schema]
    for key, value in table.items():
        dotted = f"{name}.{key}"
        if dotted in RETIRED_KEYS:
            raise UsageError(f"policy {where}: '{dotted}' is retired: {RETIRED_KEYS[dotted]}")
        if key not in schema:
            others = [k for k in _all_keys(sections) if k not in valid]
            raise _unknown(where, dotted, valid + others)
        out[key] = _check_value(where, dotted, schema[key], value)
    return out


def parse_policy(
    data: dict, where: str = "<policy>", sections: tuple[GateSection, ...] = SECTIONS
) -> Policy:
    """Validate a parsed TOML document and return the Policy; ``sections``: the sections it
    may hold (sections.py's, in report order)."""
    by_name = {s.name: s for s in sections}
    written: dict[str, dict] = {}
    top: dict[str, Any] = {}
    for key, value in data.items():
        section = by_name.get(key)
        if section is not None:
            named = section.named
            if named and isinstance(value, dict) and named.key in value:
                value = dict(value)
                tables = value.pop(named.key)
                written[f"{key}.{named.key}"] = _named_tables(where, section, tables, sections)
            written[key] = _section(where, key, value, section.keys, sections)
        elif key in TOP_LEVEL:
            top[key] = _check_value(where, key, TOP_LEVEL[key], value)
        else:
            raise _unknown(where, key, _all_keys(sections))
    limits = _limits_left_out(sections)
    for section in sections:
        limits[section.name].update(written.get(section.name, {}))
        if section.named:
            tables = f"{section.name}.{section.named.key}"
            limits[tables].update(written.get(tables, {}))
    for section in sections:
        if section.validate:
            section.validate(where, limits[section.name])
    return Policy(
        name=top.get("name") or Path(where).stem,
        source=where,
        description=top.get("description", ""),
        requires_plan=_required_plan(where, top.get("requires_plan"), limits, sections),
        require_committed=bool(top.get("require_committed", False)),
        require_model_signature=bool(top.get("require_model_signature", False)),
        limits=limits,
        sections=sections,
    )


def _checks_anything(table: dict) -> bool:
    """True when a [sustained] or [energy] table makes the gate check something."""
    switches = ("required", "require_rails")
    return any(k not in switches for k in table) or any(table.get(k) for k in switches)


def _required_plan(
    where: str, plan: str | None, limits: dict, sections: tuple[GateSection, ...]
) -> str | None:
    """``requires_plan``: a preset name, and one that runs the phases the policy limits."""
    if plan is None:
        return None
    if plan not in PRESETS:
        close = difflib.get_close_matches(plan, list(PRESETS), 1, 0.5)
        hint = f"did you mean '{close[0]}'?" if close else "one of " + ", ".join(PRESETS)
        raise UsageError(
            f"policy {where}: 'requires_plan' must name a plan, got {plan!r} ({hint})",
            hint="plans are " + ", ".join(PRESETS),
        )
    if not PRESETS[plan]["sustain_s"]:
        limited = [
            s.name for s in sections if s.needs_sustained and _checks_anything(limits[s.name])
        ]
        if limited:
            sustained = [p for p, table in PRESETS.items() if table["sustain_s"]]
            raise UsageError(
                f"policy {where}: [{limited[0]}] limits need a sustained phase, "
                f"which plan {plan} does not run",
                hint=f"set requires_plan to {' or '.join(sustained)}, or drop [{limited[0]}]",
            )
    return plan


def _named_tables(
    where: str, section: GateSection, tables: Any, sections: tuple[GateSection, ...]
) -> dict:
    """``[SECTION.KEY.NAME]`` tables (``drift.outputs``, ``edge_shapes.labels``), each
    checked against the section's per-NAME keys."""
    named = section.named
    parent = f"{section.name}.{named.key}"
    if not isinstance(tables, dict):
        raise UsageError(f"policy {where}: '{parent}' must be a table of {named.what}")
    out = {}
    for name, table in tables.items():
        dotted = f"{parent}.{name}"
        if not isinstance(table, dict):
            raise UsageError(
                f"policy {where}: '{dotted}' must be a table of limits ([{parent}.{name}])"
            )
        out[name] = _section(where, dotted, table, named.keys, sections)
    return out


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; UsageError (exit 2) naming the problem otherwise."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read policy {path}: {e.strerror}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"policy {path} is not UTF-8 text") from e
    try:
        data = parse_toml(text)
    except BadToml as e:
        raise UsageError(f"policy {path} is not valid TOML: {e}") from e
    return dataclasses.replace(
        parse_policy(data, str(path)), file_sha256=hashlib.sha256(raw).hexdigest()
    )
