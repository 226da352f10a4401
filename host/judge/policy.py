"""Gate policies: a TOML file of limits on a report's figures, loaded and validated.

Every key is checked against :data:`SCHEMA`; an unknown key is refused with its name
and the closest valid one (a misspelt limit that were silently ignored would pass
every report). A limit left out is not checked. See docs/gating.md for each key.

``requires_plan`` names the plan the policy's limits were written for (quick, standard
or soak): the gate fails a report whose plan lacks that plan's sustained phase with one
check saying so, rather than with every limit that phase would have measured.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgequal.contract.plan import PRESETS

from ..errors import UsageError
from ..toml_text import BadToml, parse_toml

STATUSES = ("passed", "degraded", "failed", "inconclusive", "incomplete")
NUMBER = "number"
INTEGER = "integer"
BOOL = "bool"
TEXT = "text"
TEXT_LIST = "list of strings"

# Per-output drift limits: policy key -> (metric in results.drift.outputs[NAME], direction).
# The figures are the worst case over the golden set; "max" limits bound them from above.
DRIFT_METRICS: dict[str, tuple[str, str]] = {
    "max_abs": ("max_abs", "max"),
    "max_mean_abs": ("mean_abs", "max"),
    "max_rel": ("max_rel", "max"),
    "min_cosine": ("cosine", "min"),
    "min_snr_db": ("snr_db", "min"),
    "min_psnr_db": ("psnr_db", "min"),
    "min_within_fraction": ("within_fraction", "min"),
    "min_top1_agreement": ("top1_agreement", "min"),
    "min_topk_overlap": ("topk_overlap", "min"),
    "max_nan_count": ("nan_count", "max"),
    "max_inf_count": ("inf_count", "max"),
}

# Limits on each edge shape (results.edge_shapes[]), for every label or one
# (edge_shapes.labels.LABEL, which overrides the section's value).
EDGE_SHAPE_LIMITS: dict[str, str] = {
    "max_p50_ms": NUMBER,
    "max_p99_ms": NUMBER,
    "max_peak_rss_mb": NUMBER,
    "max_rss_added_by_inference_mb": NUMBER,
}

# The whole path's stages, then the path (results.pipeline): [pipeline] max_PART_p50_ms, ..._p99_ms.
PATH_PARTS = ("decode", "preprocess", "inference", "decision", "end_to_end")

# Section -> key -> kind. "" is the top level; drift.outputs.NAME takes DRIFT_METRICS keys,
# edge_shapes.labels.LABEL the EDGE_SHAPE_LIMITS keys.
SCHEMA: dict[str, dict[str, str]] = {
    "": {
        "name": TEXT,
        "description": TEXT,
        "requires_plan": TEXT,
        "require_committed": BOOL,
        "require_model_signature": BOOL,
    },
    "status": {"allowed": TEXT_LIST},
    "findings": {"allowed_kinds": TEXT_LIST, "max_count": INTEGER},
    "cold_load": {
        "statistic": TEXT,
        "max_import_ms": NUMBER,
        "max_load_ms": NUMBER,
        "max_first_inference_ms": NUMBER,
        "max_total_ms": NUMBER,
        "max_process_to_result_ms": NUMBER,
    },
    "latency": {
        "max_p50_ms": NUMBER,
        "max_p90_ms": NUMBER,
        "max_p95_ms": NUMBER,
        "max_p99_ms": NUMBER,
        "max_p99_9_ms": NUMBER,
        "max_cv": NUMBER,
        "require_steady": BOOL,
    },
    "sustained": {
        "required": BOOL,
        "min_peak_per_s": NUMBER,
        "min_sustained_per_s": NUMBER,
        "min_stability": NUMBER,
        "allow_throttling": BOOL,
        "allow_under_voltage": BOOL,
        "min_time_to_first_throttle_s": NUMBER,
        "max_peak_temp_c": NUMBER,
        "min_headroom_c": NUMBER,
    },
    "drift": {
        "require_passed": BOOL,
        "timed_outputs_must_match": BOOL,
        **{k: (INTEGER if k.endswith("_count") else NUMBER) for k in DRIFT_METRICS},
        "max_flip_count": INTEGER,
        "max_flip_rate": NUMBER,
        "max_near_threshold_flips": INTEGER,
        "max_near_threshold_flip_rate": NUMBER,
    },
    "memory": {"max_peak_rss_mb": NUMBER, "max_rss_added_by_load_mb": NUMBER},
    # Accuracy on labelled golden sets (host/judge/accuracy.py): points and percent.
    "accuracy": {"max_drop": NUMBER, "min_top1": NUMBER},
    "batch": {"min_best_items_per_s": NUMBER, "min_best_items_per_s_per_core": NUMBER},
    "threads": {"min_recommended_calls_per_s": NUMBER, "max_recommended_p50_ms": NUMBER},
    "server": {
        "min_rate_at_p99_per_s": NUMBER,
        "max_p99_ms_at_target": NUMBER,
        "require_held_at_target": BOOL,
    },
    "operators": {"allow_cpu_fallback": BOOL, "max_cpu_fallback_nodes": INTEGER},
    "coload": {
        "required": BOOL,
        "max_p50_ms": NUMBER,
        "max_p99_ms": NUMBER,
        "max_p50_ratio": NUMBER,
        "max_p99_ratio": NUMBER,
    },
    "runtime_envs": {
        "required": TEXT_LIST,
        "max_p50_ratio": NUMBER,
        "max_p99_ratio": NUMBER,
        "max_cold_load_ratio": NUMBER,
        "max_flips_between": INTEGER,
        "max_drift_abs_between": NUMBER,
        "min_psnr_db_between": NUMBER,
    },
    "edge_shapes": {
        "require_all_ran": BOOL,
        **EDGE_SHAPE_LIMITS,
    },
    "energy": {
        "require_rails": BOOL,
        "max_mj_per_inference": NUMBER,
        "max_mj_per_inference_above_idle": NUMBER,
        "max_power_w": NUMBER,
    },
    "repeat": {
        "min_runs": INTEGER,
        "max_cv": NUMBER,
    },
    "pipeline": {
        **{f"max_{part}_{p}_ms": NUMBER for part in PATH_PARTS for p in ("p50", "p99")},
        "max_preprocessing_abs": NUMBER,
    },
    # Change points over the history (host/lab/changes.py: history changes, the fleet's
    # JUnit): sensitivity over the lab's [changes]; keys as ChangeSettings.KEYS (p_value is
    # refused where the settings are resolved: it is the lab's alone).
    "changes": {
        "p_value": NUMBER,
        "fail_on_machine": BOOL,
        "min_points": INTEGER,
        "permutations": INTEGER,
        "seed": INTEGER,
        "min_effect": NUMBER,
        **{
            f"min_effect_{k}": NUMBER
            for k in (
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
        },  # fmt: skip
    },
    "baseline": {
        "min_effect": NUMBER,
        # SAME / DIFFERENT / UNKNOWN (host/judge/verdict.py: VERDICT_DEFAULTS).
        "alpha_different": NUMBER,
        "alpha_same": NUMBER,
        "session_shift": NUMBER,
        "confidence": NUMBER,
        "iterations": INTEGER,
        "seed": INTEGER,
        "max_throughput_drop": NUMBER,
        "require_same": TEXT_LIST,
    },
}

# Sections whose figures only a sustained phase measures.
SUSTAINED_SECTIONS = ("sustained", "energy")
# Sections limiting the service scenarios and energy (each its own Policy field).
SCENARIO_SECTIONS = ("batch", "threads", "server", "operators", "energy")
# Sections limiting the run under real conditions: declared co-load, edge shapes.
CONDITION_SECTIONS = ("coload", "edge_shapes")
BASELINE_DEFAULTS = {"min_effect": 0.03, "confidence": 0.95, "iterations": 1000, "seed": 0}
DEFAULT_ALLOWED_STATUSES = ("passed", "degraded")
COLD_LOAD_STATISTICS = ("median", "max")
# Fingerprint fields a baseline may be required to share (require_same).
SAME_FIELDS = (
    "board_model",
    "soc",
    "architecture",
    "cpu_count",
    "kernel",
    "os_release",
    "runtime",
    "runtime_version",
    "threads",
    "model",
    "golden",
)


@dataclass(frozen=True)
class Policy:
    """A validated gate policy: limits per section; a limit left out is absent from its dict."""

    name: str
    source: str
    description: str = ""
    requires_plan: str | None = None
    # The run must have committed to this very policy before it ran (host/judge/claims.py).
    require_committed: bool = False
    # The model's signature verified on the device before it was loaded.
    require_model_signature: bool = False
    allowed_statuses: tuple[str, ...] = DEFAULT_ALLOWED_STATUSES
    findings: dict = field(default_factory=dict)
    cold_load: dict = field(default_factory=dict)
    latency: dict = field(default_factory=dict)
    sustained: dict = field(default_factory=dict)
    drift: dict = field(default_factory=dict)
    drift_outputs: dict[str, dict] = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    accuracy: dict = field(default_factory=dict)
    """``[accuracy]``: the paired top-1 drop (points) and top-1 (percent), on their intervals."""
    baseline: dict = field(default_factory=lambda: dict(BASELINE_DEFAULTS))
    batch: dict = field(default_factory=dict)
    threads: dict = field(default_factory=dict)
    server: dict = field(default_factory=dict)
    operators: dict = field(default_factory=dict)
    energy: dict = field(default_factory=dict)
    coload: dict = field(default_factory=dict)
    edge_shapes: dict = field(default_factory=dict)
    edge_shape_labels: dict[str, dict] = field(default_factory=dict)
    pipeline: dict = field(default_factory=dict)
    runtime_envs: dict = field(default_factory=dict)
    changes: dict = field(default_factory=dict)
    """Change-point sensitivity (``[changes]``), applied by ``host/lab/changes.py``."""
    repeat: dict = field(default_factory=dict)
    # The sha256 of the file's bytes as read (None for a policy given as data).
    file_sha256: str | None = None

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
        out["status"] = {"allowed": list(self.allowed_statuses)}
        for section in (
            "findings",
            "cold_load",
            "latency",
            "sustained",
            "memory",
            "accuracy",
            "baseline",
            *SCENARIO_SECTIONS,
            "coload",
            "pipeline",
            "runtime_envs",
            "repeat",
            "changes",
        ):
            out[section] = dict(getattr(self, section))
        out["edge_shapes"] = {
            **self.edge_shapes,
            "labels": {k: dict(v) for k, v in self.edge_shape_labels.items()},
        }
        out["drift"] = {
            **self.drift,
            "outputs": {k: dict(v) for k, v in self.drift_outputs.items()},
        }
        return out


def _all_keys() -> list[str]:
    keys = [f"{s}.{k}" if s else k for s, ks in SCHEMA.items() for k in ks]
    keys += [s for s in SCHEMA if s]
    keys += [f"drift.outputs.NAME.{k}" for k in DRIFT_METRICS]
    keys += [f"edge_shapes.labels.LABEL.{k}" for k in EDGE_SHAPE_LIMITS]
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


def _section(where: str, name: str, table: Any, schema: dict[str, str]) -> dict:
    if not isinstance(table, dict):
        raise UsageError(f"policy {where}: '{name}' must be a table ([{name}])")
    out = {}
    valid = [f"{name}.{k}" for k in schema]
    for key, value in table.items():
        dotted = f"{name}.{key}"
        if dotted in RETIRED_KEYS:
            raise UsageError(f"policy {where}: '{dotted}' is retired: {RETIRED_KEYS[dotted]}")
        if key not in schema:
            raise _unknown(where, dotted, valid + [k for k in _all_keys() if k not in valid])
        out[key] = _check_value(where, dotted, schema[key], value)
    return out


def parse_policy(data: dict, where: str = "<policy>") -> Policy:
    """Validate a parsed TOML document and return the Policy."""
    top_schema = SCHEMA[""]
    sections: dict[str, dict] = {}
    top: dict[str, Any] = {}
    for key, value in data.items():
        if key in SCHEMA and key:
            if key == "drift" and isinstance(value, dict) and "outputs" in value:
                value = dict(value)
                outputs = value.pop("outputs")
                sections["drift.outputs"] = _drift_outputs(where, outputs)
            if key == "edge_shapes" and isinstance(value, dict) and "labels" in value:
                value = dict(value)
                labels = value.pop("labels")
                sections["edge_shapes.labels"] = _edge_shape_labels(where, labels)
            sections[key] = _section(where, key, value, SCHEMA[key])
        elif key in top_schema:
            top[key] = _check_value(where, key, top_schema[key], value)
        else:
            raise _unknown(where, key, _all_keys())

    allowed = sections.get("status", {}).get("allowed", list(DEFAULT_ALLOWED_STATUSES))
    for s in allowed:
        if s not in STATUSES:
            close = difflib.get_close_matches(s, STATUSES, 1, 0.5)
            hint = f"did you mean '{close[0]}'?" if close else "one of " + ", ".join(STATUSES)
            raise UsageError(f"policy {where}: unknown status '{s}' in status.allowed ({hint})")
    cold = sections.get("cold_load", {})
    if cold.get("statistic", "median") not in COLD_LOAD_STATISTICS:
        raise UsageError(
            f"policy {where}: 'cold_load.statistic' must be median or max, got {cold['statistic']!r}"
        )
    baseline = {**BASELINE_DEFAULTS, **sections.get("baseline", {})}
    if not 0.0 < baseline["confidence"] < 1.0:
        raise UsageError(f"policy {where}: 'baseline.confidence' must be between 0 and 1")
    if baseline["iterations"] < 1:
        raise UsageError(f"policy {where}: 'baseline.iterations' must be at least 1")
    # The three-way verdict's test levels (host/judge/verdict.py).
    for key, ok, rule in (
        ("min_effect", lambda v: v >= 0, "at least 0"),
        ("alpha_different", lambda v: 0 < v < 1, "above 0 and below 1"),
        ("alpha_same", lambda v: 0 < v < 0.5, "above 0 and below 0.5"),
        ("session_shift", lambda v: v >= 0, "at least 0"),
    ):
        if key in baseline and not ok(baseline[key]):
            raise UsageError(
                f"policy {where}: 'baseline.{key}' must be {rule}, got {baseline[key]}"
            )
    for f in baseline.get("require_same", []):
        if f not in SAME_FIELDS:
            close = difflib.get_close_matches(f, SAME_FIELDS, 1, 0.5)
            hint = f"did you mean '{close[0]}'?" if close else "one of " + ", ".join(SAME_FIELDS)
            raise UsageError(
                f"policy {where}: unknown field '{f}' in baseline.require_same ({hint})"
            )
    requires_plan = _required_plan(where, top.get("requires_plan"), sections)
    return Policy(
        name=top.get("name") or Path(where).stem,
        source=where,
        description=top.get("description", ""),
        requires_plan=requires_plan,
        require_committed=bool(top.get("require_committed", False)),
        require_model_signature=bool(top.get("require_model_signature", False)),
        allowed_statuses=tuple(allowed),
        findings=sections.get("findings", {}),
        cold_load=cold,
        latency=sections.get("latency", {}),
        sustained=sections.get("sustained", {}),
        drift=sections.get("drift", {}),
        drift_outputs=sections.get("drift.outputs", {}),
        memory=sections.get("memory", {}),
        accuracy=sections.get("accuracy", {}),
        baseline=baseline,
        **{name: sections.get(name, {}) for name in SCENARIO_SECTIONS + CONDITION_SECTIONS},
        edge_shape_labels=sections.get("edge_shapes.labels", {}),
        pipeline=sections.get("pipeline", {}),
        runtime_envs=sections.get("runtime_envs", {}),
        repeat=sections.get("repeat", {}),
        changes=sections.get("changes", {}),
    )


def _checks_anything(table: dict) -> bool:
    """True when a [sustained] or [energy] table makes the gate check something."""
    switches = ("required", "require_rails")
    return any(k not in switches for k in table) or any(table.get(k) for k in switches)


def _required_plan(where: str, plan: str | None, sections: dict) -> str | None:
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
        limited = [s for s in SUSTAINED_SECTIONS if _checks_anything(sections.get(s) or {})]
        if limited:
            sustained = [p for p, table in PRESETS.items() if table["sustain_s"]]
            raise UsageError(
                f"policy {where}: [{limited[0]}] limits need a sustained phase, "
                f"which plan {plan} does not run",
                hint=f"set requires_plan to {' or '.join(sustained)}, or drop [{limited[0]}]",
            )
    return plan


def _named_tables(where: str, parent: str, tables: Any, schema: dict, what: str) -> dict:
    """``[parent.NAME]`` tables (``drift.outputs``, ``edge_shapes.labels``), each checked
    against ``schema``; ``what`` names the NAMEs in the error."""
    if not isinstance(tables, dict):
        raise UsageError(f"policy {where}: '{parent}' must be a table of {what}")
    out = {}
    for name, table in tables.items():
        section = f"{parent}.{name}"
        if not isinstance(table, dict):
            raise UsageError(
                f"policy {where}: '{section}' must be a table of limits ([{parent}.{name}])"
            )
        out[name] = _section(where, section, table, schema)
    return out


def _drift_outputs(where: str, outputs: Any) -> dict[str, dict]:
    schema = {k: SCHEMA["drift"][k] for k in DRIFT_METRICS}
    return _named_tables(where, "drift.outputs", outputs, schema, "outputs")


def _edge_shape_labels(where: str, labels: Any) -> dict[str, dict]:
    return _named_tables(where, "edge_shapes.labels", labels, EDGE_SHAPE_LIMITS, "edge shapes")


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
