"""Which night changed, beyond noise, and why: change points over a lab's history.

A **series** is one board × model × plan preset: the model by its name in the lab's models
file (``model_label``), else its file name, so a new export of the same model (a new
digest) or a new golden set stays in the series and becomes a culprit field like any
other; a change of preset starts a new series (a quick run and a standard run measure
different things). Its **points** are the recorded runs, oldest first, the last attempt of
a fleet cell only (retries collapse). Inconclusive and incomplete runs are never points:
they are **gaps**, listed and counted, because their figures are either measured through
interference or missing.

Each series gives one row of numbers per **figure** (:func:`figures_of`): clean p50 and
p99 per input shape, sustained throughput and stability, cold load and first inference
(medians), worst drift per output (max absolute error), peak memory and energy per
inference where measured. Each figure's series goes to the detector of
``host/judge/change_points.py``; each change found carries the first run after it (run
id, date, fleet run), the medians either side with a bootstrap interval of their ratio
(``host/judge/regression.py``), the p-value, the boards where the same change appears,
the **culprit** (:func:`culprit`: every fingerprint field that differs between the runs
either side, ranked by how well it separates the runs before from those after) and, where
both sides profiled their operators, the per-operator diff.

Each change has a **cause** (``host/lab/change_causes.py``): ``recorded`` (a culprit field),
``machine`` (nothing recorded changed; other processes' CPU use, the clean-call fraction or
the bare speed moved with it) or ``unexplained``; a machine change is shown, not failed,
unless the lab says so (``fail_on_machine``).

Sensitivity (:class:`ChangeSettings`, resolved once by :func:`change_settings` for
``history changes``, ``history trend`` and ``fleet run``) comes from the defaults below,
then the lab file's ``[changes]`` table, then a policy's ``[changes]`` section (minimum
effects and ``fail_on_machine``; never the p-value, which is the lab's), then
``--p-value`` (docs/history.md).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from edgequal.contract.preemption import decisive_entry

from ..errors import UsageError
from ..judge.baseline import change_category, fingerprint_fields
from ..judge.change_points import (
    DEFAULT_MIN_POINTS,
    DEFAULT_P_VALUE,
    DEFAULT_PERMUTATIONS,
    change_points,
)
from ..judge.report_file import ReportFile, decoded_report
from .change_causes import (
    DIRECTED_KINDS,
    cause_of,
    fails,
    machine_evidence,
    machine_readings,
    machine_text,
)
from .change_causes import separation as numeric_separation

GAP_STATUSES = ("failed", "inconclusive", "incomplete")
"""Statuses whose runs are never points of a series, each shown as a gap of its status:
a failed run's figures are not the model's on a working board, an inconclusive run's are
the interference's, an incomplete run's are missing. (Not 0, and not a figure.)"""

DEFAULT_MIN_EFFECT: Mapping[str, float] = {
    "latency": 0.05,
    "tail": 0.10,
    "throughput": 0.05,
    "stability": 0.05,
    "cold": 0.20,
    "drift": 1.0,
    "memory": 0.05,
    "energy": 0.05,
    "accuracy": 0.01,
}
"""Smallest change that matters, as a fraction of the median before, per kind of figure.

Latency p50, throughput, memory and energy: 5 %; p99: 10 % (a tail moves more night to
night); cold load and first inference: 20 % (one process start, page cache and disk);
drift: 100 % (a max absolute error doubling: smaller moves are rounding noise);
accuracy (top-1 on labelled cases, docs/accuracy.md): 1 %, about a point at 90 %."""

SAME_CHANGE_WINDOW = dt.timedelta(hours=36)
"""Two boards' changes are the same change when their first runs after it belong to one
fleet run or were measured within this of each other: noise can place one board's change
a night later than another's (its first slow night looked like the nights before)."""

_MB = 1 << 20


@dataclass(frozen=True)
class ChangeSettings:
    """How sensitive change detection is: p-value, points either side, permutations, seed,
    and the minimum effect per kind of figure (:data:`DEFAULT_MIN_EFFECT`)."""

    p_value: float = DEFAULT_P_VALUE
    min_points: int = DEFAULT_MIN_POINTS
    permutations: int = DEFAULT_PERMUTATIONS
    seed: int = 0
    min_effect: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIN_EFFECT))
    fail_on_machine: bool = False
    """A new change for the worse that only the machine explains (cause ``machine``) fails
    the fleet run too (default: shown and recorded, not failed)."""

    KEYS = ("p_value", "min_points", "permutations", "seed", "min_effect", "fail_on_machine") + (
        tuple(f"min_effect_{k}" for k in DEFAULT_MIN_EFFECT)
    )

    def updated(
        self, table: Mapping[str, Any] | None, where: str, p_value: bool = True
    ) -> ChangeSettings:
        """These settings with a ``[changes]`` table's keys applied (``min_effect`` sets every
        kind, ``min_effect_<kind>`` one); UsageError naming ``where`` on a bad key or value.
        ``p_value=False``: the table may not set the p-value (a policy's: it is the lab's)."""
        if not table:
            return self
        if not isinstance(table, Mapping):
            raise UsageError(f"{where}: [changes] must be a table")
        out = replace(self, min_effect=dict(self.min_effect))
        effects = dict(out.min_effect)
        for key, value in table.items():
            if key not in self.KEYS:
                raise UsageError(
                    f"{where}: unknown key changes.{key}", hint="one of " + ", ".join(self.KEYS)
                )
            if key == "p_value" and not p_value:
                raise UsageError(
                    f"{where}: changes.p_value is the lab's setting, not a policy's",
                    hint="set [changes] p_value in lab.toml or pass --p-value: history changes, "
                    "history trend and fleet run then use the same",
                )
            if key == "fail_on_machine":
                if not isinstance(value, bool):
                    raise UsageError(f"{where}: changes.fail_on_machine must be true or false")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"{where}: changes.{key} must be a number")
            if key == "p_value" and not 0.0 < value < 1.0:
                raise UsageError(f"{where}: changes.p_value must be between 0 and 1")
            if key in ("min_points", "permutations", "seed") and (
                int(value) != value or value < (0 if key == "seed" else 1)
            ):
                raise UsageError(f"{where}: changes.{key} must be a whole number of at least 1")
            if key.startswith("min_effect") and not 0.0 <= value < 100:
                raise UsageError(f"{where}: changes.{key} must be a fraction (0.05 = 5 %)")
        if "min_effect" in table:
            effects = {k: float(table["min_effect"]) for k in effects}
        for kind in DEFAULT_MIN_EFFECT:
            if f"min_effect_{kind}" in table:
                effects[kind] = float(table[f"min_effect_{kind}"])
        return replace(
            out,
            p_value=float(table.get("p_value", out.p_value)),
            min_points=int(table.get("min_points", out.min_points)),
            permutations=int(table.get("permutations", out.permutations)),
            seed=int(table.get("seed", out.seed)),
            min_effect=effects,
            fail_on_machine=bool(table.get("fail_on_machine", out.fail_on_machine)),
        )

    def with_p_value(self, p_value: float | None, where: str = "--p-value") -> ChangeSettings:
        """These settings with the command's ``--p-value`` (None: unchanged)."""
        if p_value is None:
            return self
        if not 0.0 < p_value < 1.0:
            raise UsageError(f"{where} must be between 0 and 1, got {p_value:g}")
        return replace(self, p_value=float(p_value))

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return {**asdict(self), "min_effect": dict(self.min_effect)}


def change_settings(lab=None, policy=None, policy_path=None, p_value=None) -> ChangeSettings:
    """The one sensitivity of ``history changes``, ``history trend`` and ``fleet run``: the
    defaults, the lab's ``[changes]`` (``lab``: ``inventory.Lab``), a policy's ``[changes]``
    (``policy``: ``judge.policy.Policy`` read from ``policy_path``; its minimum effects and
    ``fail_on_machine``, never the p-value), then ``--p-value``."""
    settings = ChangeSettings()
    if lab is not None:
        settings = settings.updated(lab.changes, str(lab.path))
    if policy is not None:
        settings = settings.updated(policy.changes, str(policy_path or "policy"), p_value=False)
    return settings.with_p_value(p_value)


# -- figures ---------------------------------------------------------------------------


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class Figure:
    """One figure of a run: its name, unit, kind (for the minimum effect), which way is better."""

    name: str
    unit: str
    kind: str
    better: str = "lower"


REPEATED_FIGURES = ("p50_ms", "p99_ms", "sustained_per_s")
"""The figures ``qualify --repeat N`` measures in every run (agent/phases/qualification.py
``repeat_figures``): the first input shape's p50 and p99 (clean where they decide) and
the sustained throughput."""


def repeated_spread(results: Mapping) -> tuple[int, dict[str, dict]] | None:
    """A report of ``qualify --repeat N`` (N ≥ 2) as one point: ``(n, {figure: spread})``
    with each of :data:`REPEATED_FIGURES` the runs measured and its spread
    (``contract/stats.repeat_spread``: median, CV...); None for a report of one run.
    History, its trends and its change points take the median as the point's value."""
    repeats = results.get("repeats") or {}
    spread = repeats.get("spread") or {}
    n = repeats.get("n")
    if not isinstance(n, int) or n < 2 or not isinstance(spread, dict):
        return None
    return n, {
        k: spread[k]
        for k in REPEATED_FIGURES
        if isinstance(spread.get(k), dict) and _number(spread[k].get("median")) is not None
    }


def figures_of(predicate: Mapping) -> dict[Figure, float]:
    """The figures of one report a series follows (those it measured). A report of
    repeated runs (``qualify --repeat N``) is one point: the figures its runs repeated
    (first shape's p50 and p99, sustained throughput) are the runs' medians
    (:func:`repeated_spread`)."""
    results = predicate.get("results") or {}
    repeated = repeated_spread(results)
    medians = {k: s["median"] for k, s in repeated[1].items()} if repeated else {}
    out: dict[Figure, float | None] = {}
    for i, entry in enumerate(_get(results, "latency", "per_shape") or []):
        shape = entry.get("shape") or "default"
        summary = {**(decisive_entry(entry).get("summary") or {}), **(medians if i == 0 else {})}
        out[Figure(f"p50 {shape}", "ms", "latency")] = _number(summary.get("p50_ms"))
        out[Figure(f"p99 {shape}", "ms", "tail")] = _number(summary.get("p99_ms"))
    sustained = results.get("sustained") or {}
    out[Figure("sustained throughput", "/s", "throughput", "higher")] = _number(
        medians.get("sustained_per_s", sustained.get("sustained_per_s"))
    )
    out[Figure("stability", "", "stability", "higher")] = _number(sustained.get("stability"))
    out[Figure("energy per inference", "mJ", "energy")] = _number(
        _get(sustained, "power", "summary", "mj_per_inference_median")
    )
    out[Figure("cold load", "ms", "cold")] = _number(
        _get(results, "cold_load", "total_ms", "median")
    )
    out[Figure("first inference", "ms", "cold")] = _number(
        _get(results, "cold_load", "first_inference_ms", "median")
    )
    for name, drift in sorted((_get(results, "drift", "outputs") or {}).items()):
        out[Figure(f"drift {name}", "", "drift")] = _number(_get(drift, "max_abs"))
    labelled = _get(results, "drift", "labelled") or {}
    classification = labelled.get("task", "classification") == "classification"
    if labelled.get("cases") and classification:  # the device's top-1, in percent
        rows = labelled["cases"]
        top1 = sum(1 for r in rows if r.get("device", [])[:1] == [r.get("label")])
        out[Figure("accuracy top-1", "%", "accuracy", "higher")] = 100 * top1 / len(rows)
    rss = _number(_get(results, "memory", "peak_rss_bytes"))
    out[Figure("peak memory", "MB", "memory")] = None if rss is None else rss / _MB
    out.update(runtime_env_figures(results))
    return {f: v for f, v in out.items() if v is not None}


def runtime_env_figures(results: Mapping) -> dict[Figure, float | None]:
    """The figures of each runtime environment the run measured side by side (``qualify
    --runtime-env``), named by the environment's place in the plan, ``(runtime env 1)``
    for the first: a lab that moves its nightly plan to another version (another
    environment name) keeps one series, and the culprit names the environments either
    side (``runtime_envs[1].version``, its wheels). p50 and p99 of its shape (all calls:
    the segments are timed untagged), cold load, and drift per output."""
    out: dict[Figure, float | None] = {}
    for i, env in enumerate(_get(results, "runtime_envs", "environments") or [], start=1):
        if not isinstance(env, Mapping) or env.get("status") != "ok":
            continue
        tag = f" (runtime env {i})"
        shapes = _get(env, "latency", "per_shape") or [{}]
        shape = shapes[0].get("shape") or "default"
        summary = shapes[0].get("summary") or {}
        out[Figure(f"p50 {shape}{tag}", "ms", "latency")] = _number(summary.get("p50_ms"))
        out[Figure(f"p99 {shape}{tag}", "ms", "tail")] = _number(summary.get("p99_ms"))
        out[Figure(f"cold load{tag}", "ms", "cold")] = _number(
            _get(env, "cold_load", "total_ms", "median")
        )
        for name, drift in sorted((_get(env, "drift", "outputs") or {}).items()):
            out[Figure(f"drift {name}{tag}", "", "drift")] = _number(_get(drift, "max_abs"))
    return out


# -- series -----------------------------------------------------------------------------


@dataclass
class Point:
    """One run of a series: where it came from, and its decoded report."""

    run_id: str
    measured_at: dt.datetime
    fleet_run: str | None
    envelope_sha256: str
    report: ReportFile

    def to_json(self) -> dict:
        """Where the run came from (without its report)."""
        return {
            "run_id": self.run_id,
            "measured_at": _iso(self.measured_at),
            "fleet_run": self.fleet_run,
            "envelope_sha256": self.envelope_sha256,
        }


@dataclass
class Series:
    """One board × model × plan preset: its points (oldest first) and gaps."""

    device: str
    model: str
    preset: str | None
    points: list[Point] = field(default_factory=list)
    gaps: list[dict] = field(default_factory=list)
    figures: int = 0
    """How many figures' series the detector examined."""

    @property
    def key(self) -> tuple[str, str, str]:
        """(device, model, preset) as text."""
        return (self.device, self.model, self.preset or "")

    def to_json(self) -> dict:
        """Its name, how many points and gaps (with the gaps listed)."""
        return {
            "device": self.device,
            "model": self.model,
            "preset": self.preset,
            "points": len(self.points),
            "figures": self.figures,
            "gaps": self.gaps,
        }


def _iso(when: dt.datetime | None) -> str | None:
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def fleet_run_of(cell: str | None) -> str | None:
    """The fleet run a history cell belongs to (``lab/20261114T0200Z-abc123``), or None."""
    if not cell or cell.count("/") < 2:
        return None
    return cell.rsplit("/", 2)[0]


def build_series(rows: Iterable[Mapping]) -> list[Series]:
    """Series from history rows (``History.runs``: oldest first, with envelopes)."""
    series: dict[tuple[str, str, str | None], Series] = {}
    for row in rows:
        model = row.get("model_label") or row["model_name"]
        key = (row["device"], model, row.get("preset"))
        s = series.setdefault(key, Series(*key))
        if row["status"] in GAP_STATUSES:
            s.gaps.append(
                {
                    "run_id": row["run_id"],
                    "measured_at": _iso(row["measured_at"]),
                    "status": row["status"],
                    "fleet_run": fleet_run_of(row.get("cell")),
                }
            )
            continue
        report = decoded_report(row["envelope"], f"history:{row['run_id']}", "recorded verified")
        if report is None:
            continue  # recorded only after verifying: undecodable means a damaged row
        s.points.append(
            Point(
                run_id=row["run_id"],
                measured_at=row["measured_at"],
                fleet_run=fleet_run_of(row.get("cell")),
                envelope_sha256=row["envelope_sha256"],
                report=report,
            )
        )
    return sorted(series.values(), key=lambda s: s.key)


# -- changes ----------------------------------------------------------------------------


@dataclass
class Change:
    """One change point of one figure in one series, with its evidence and culprit."""

    device: str
    model: str
    preset: str | None
    figure: str
    unit: str
    kind: str
    better: str
    index: int
    first_after: dict
    last_before: dict
    median_before: float
    median_after: float
    ratio: float | None
    ratio_ci: tuple[float, float] | None
    p_value: float
    n_before: int
    n_after: int
    min_effect: float
    reports_before: list[str] = field(default_factory=list)
    reports_after: list[str] = field(default_factory=list)
    boards: list[str] = field(default_factory=list)
    culprit: list[dict] = field(default_factory=list)
    operators: list[dict] = field(default_factory=list)
    load: dict | None = None
    """Other processes' CPU use in the timed loops either side (:func:`load_either_side`)."""
    machine: list[dict] = field(default_factory=list)
    """The machine's measurements either side (``change_causes.machine_evidence``): what a
    change with no recorded culprit is read against."""
    too_noisy: str | None = None
    """Why the board is too noisy for this minimum effect (:func:`series_noise`), or None: a
    change found there may be its noise moving (a neighbour's load, a clock), so read it so."""

    @property
    def worse(self) -> bool:
        """The figure moved the bad way (slower, less throughput, more drift or memory)."""
        return _worse(self.median_before, self.median_after, self.better)

    @property
    def cause(self) -> str:
        """``recorded``, ``machine`` or ``unexplained`` (``change_causes.cause_of``)."""
        return cause_of(self.culprit, self.machine)

    def fails(self, settings: ChangeSettings) -> bool:
        """Whether this change, new in a fleet run, fails it (``change_causes.fails``)."""
        return fails(self.worse, self.cause, settings.fail_on_machine)

    def headline(self) -> str:
        """One line: 'p50 x +31 % from 2026-11-14 on pi5-a and pi5-b; changed there: ...'."""
        if self.ratio is not None:
            size = f"{(self.ratio - 1.0) * 100:+.0f} %"
        else:
            size = f"{self.median_before:g} → {self.median_after:g}"
        boards = " and ".join(self.boards) if self.boards else self.device
        text = (
            f"{self.figure} {size} from {(self.first_after['measured_at'] or '')[:10]} "
            f"on {boards} ({self.model}, {self.preset or 'no preset'})"
        )
        if self.culprit:
            text += "; changed there: " + culprit_text(self.culprit)
        else:
            text += "; nothing recorded changed there" + machine_text(self.machine)
        ops = operators_text(self.operators)
        if ops:
            text += "; " + ops
        if self.too_noisy:
            text += f" (on a noisy board: {self.too_noisy})"
        return text

    def to_json(self) -> dict:
        """JSON-ready fields, with the headline."""
        out = asdict(self)
        out["ratio_ci"] = list(self.ratio_ci) if self.ratio_ci else None
        out["worse"] = self.worse
        out["cause"] = self.cause
        out["headline"] = self.headline()
        return out


def culprit_fields(culprit: list[dict]) -> list[dict]:
    """A change's culprit fields, the model first (a new export explains most), then the
    golden set, then the rest as :func:`culprit` ranked them."""
    first = {"model": 0, "golden": 1}
    return sorted(culprit, key=lambda c: first.get(c["field"], 2))


def culprit_field_text(c: Mapping) -> str:
    """One culprit field in words: ``model m.onnx sha256 1a2b… → 3c4d…`` (a digest's file
    name said once where it did not change), ``runtime.version 1.20.0 → 1.21.0``."""
    before, after = str(c["before"]), str(c["after"])
    b_name, b_sep, b_digest = before.rpartition(" sha256 ")
    a_name, a_sep, a_digest = after.rpartition(" sha256 ")
    if b_sep and a_sep and b_name == a_name:
        return f"{c['field']} {b_name} sha256 {b_digest} → {a_digest}"
    return f"{c['field']} {before} → {after}"


def culprit_text(culprit: list[dict]) -> str:
    """Every culprit field of a change, the model first, joined: what a headline names."""
    return ", ".join(culprit_field_text(c) for c in culprit_fields(culprit))


def load_either_side(before: list[Point], after: list[Point]) -> dict | None:
    """Other processes' CPU use (``other_cpus``, measured by the agent in each run's timed
    loop of its first shape) either side of a change: medians and separation; None where a
    side has no such measurement (a board without /proc/stat)."""

    def other(points: list[Point]) -> list[float]:
        out = []
        for p in points:
            entries = _get(p.report.predicate, "results", "latency", "per_shape") or []
            ev = (decisive_entry(entries[0]).get("interference") or {}) if entries else {}
            if _number(ev.get("other_cpus")) is not None:
                out.append(float(ev["other_cpus"]))
        return out

    b, a = other(before), other(after)
    if not b or not a:
        return None
    return {
        "other_cpus_before": round(float(np.median(b)), 3),
        "other_cpus_after": round(float(np.median(a)), 3),
        "separation": round(_separation(b, a), 3),
    }


def operators_text(diff: list[dict], top: int = 2) -> str:
    """The ``top`` largest moves of an operator diff: ``Conv +44 %, Resize +210 %`` ('' if none)."""
    ops = [o for o in diff if o.get("ratio") is not None][:top]
    return ", ".join(f"{o['op_type']} {(o['ratio'] - 1) * 100:+.0f} %" for o in ops)


def _separation(before: list, after: list) -> float:
    """How well a field's values tell the runs before from those after, 0 (not at all) to 1.

    Numbers (a start temperature): |2·AUC − 1| of the values (the Mann–Whitney U statistic
    scaled); anything else: the share of runs whose value occurs on one side only.
    """
    b = [v for v in before if v is not None]
    a = [v for v in after if v is not None]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a + b)
    if numeric and a and b:
        return numeric_separation(b, a)
    ab = [_hashable(v) for v in before]
    aa = [_hashable(v) for v in after]
    only_before = sum(1 for v in ab if v not in set(aa))
    only_after = sum(1 for v in aa if v not in set(ab))
    total = len(ab) + len(aa)
    return (only_before + only_after) / total if total else 0.0


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)


def culprit(before: list[Point], after: list[Point], window: int = 1) -> list[dict]:
    """Every fingerprint field that differs between the runs either side of the change,
    ranked by how well it separates the runs before from those after (best first).

    "Either side" spans ``window`` runs beyond the adjacent pair each way: under noise a
    change's first slow run can look like the runs before it, so the detected point may
    sit a run late (or early) of the night the firmware or model changed. Each field's
    ``before``/``after`` are its values at its own change nearest the point.
    """
    if not before or not after:
        return []
    fields_before = [fingerprint_fields(p.report.predicate, p.report.subjects) for p in before]
    fields_after = [fingerprint_fields(p.report.predicate, p.report.subjects) for p in after]
    near = fields_before[-(window + 1) :] + fields_after[: window + 1]
    split = min(window + 1, len(fields_before))  # index in ``near`` of the first run after
    out = []
    keys = sorted({k for f in near for k in f})
    for key in keys:
        steps = [i for i in range(1, len(near)) if near[i - 1].get(key) != near[i].get(key)]
        if not steps:
            continue
        i = min(steps, key=lambda j: (abs(j - split), j))  # the step nearest the point
        score = _separation([f.get(key) for f in fields_before], [f.get(key) for f in fields_after])
        out.append(
            {
                "field": key,
                "category": change_category(key),
                "before": near[i - 1].get(key),
                "after": near[i].get(key),
                "separation": round(score, 3),
            }
        )
    out.sort(key=lambda c: (-c["separation"], c["field"]))
    return out


def operator_times(profiles: Iterable[list[dict] | None]) -> dict[str, list[float]]:
    """µs per inference of each operator type over several operator profiles
    (``results.operators.profile.operators`` lists), one value per profile that has it."""
    times: dict[str, list[float]] = {}
    for ops in profiles:
        for op in ops or []:
            us = _number(op.get("us_per_run"))
            if op.get("op_type") and us is not None:
                times.setdefault(op["op_type"], []).append(us)
    return times


def operator_diff(before: list[Point], after: list[Point]) -> list[dict]:
    """Per operator type, the median µs per inference either side, their ratio and its share
    of the time after, the largest moves first; [] unless both sides have a profile."""
    return profile_diff(
        [_get(p.report.predicate, "results", "operators", "profile", "operators") for p in before],
        [_get(p.report.predicate, "results", "operators", "profile", "operators") for p in after],
    )


def profile_diff(
    before: Iterable[list[dict] | None], after: Iterable[list[dict] | None]
) -> list[dict]:
    """:func:`operator_diff` over operator profiles themselves (a history's runs, or the
    runtime versions ``bisect runtime`` measured): the median of each side's profiles."""
    b, a = operator_times(before), operator_times(after)
    if not b or not a:
        return []
    total_after = sum(float(np.median(v)) for v in a.values()) or 1.0
    out = []
    for op in sorted(set(a) | set(b)):
        mb = float(np.median(b[op])) if op in b else None
        ma = float(np.median(a[op])) if op in a else None
        out.append(
            {
                "op_type": op,
                "us_before": mb,
                "us_after": ma,
                "ratio": (ma / mb) if mb and ma is not None else None,
                "share_after": round((ma or 0.0) / total_after, 4),
            }
        )
    out.sort(key=lambda o: -abs((o["us_after"] or 0.0) - (o["us_before"] or 0.0)))
    return out


def _ratio_ci(before: np.ndarray, after: np.ndarray, seed: int) -> tuple[float, float] | None:
    """The bootstrap interval of median(after) / median(before) (regression.py's)."""
    from ..judge.regression import bootstrap_median_ratio

    if float(np.median(before)) <= 0:
        return None
    r = bootstrap_median_ratio(before, after, iterations=2000, seed=seed)
    return (r.ci_low, r.ci_high)


def series_changes(s: Series, settings: ChangeSettings) -> list[Change]:
    """The changes of every figure of one series."""
    per_point = [figures_of(p.report.predicate) for p in s.points]
    figures: list[Figure] = []
    for f in per_point:
        for fig in f:
            if fig not in figures:
                figures.append(fig)
    s.figures = len(figures)
    out = []
    for fig in figures:
        idx = [i for i, f in enumerate(per_point) if fig in f]
        values = np.array([per_point[i][fig] for i in idx])
        min_effect = settings.min_effect.get(fig.kind, DEFAULT_MIN_EFFECT[fig.kind])
        splits = change_points(
            values,
            p_value=settings.p_value,
            min_effect=min_effect,
            min_points=settings.min_points,
            permutations=settings.permutations,
            seed=settings.seed,
        )
        bounds = [0] + [sp.index for sp in splits] + [len(idx)]
        for k, sp in enumerate(splits):
            before = [s.points[i] for i in idx[bounds[k] : sp.index]]
            after = [s.points[i] for i in idx[sp.index : bounds[k + 2]]]
            out.append(
                Change(
                    device=s.device,
                    model=s.model,
                    preset=s.preset,
                    figure=fig.name,
                    unit=fig.unit,
                    kind=fig.kind,
                    better=fig.better,
                    index=idx[sp.index],
                    first_after=after[0].to_json(),
                    last_before=before[-1].to_json(),
                    median_before=sp.median_before,
                    median_after=sp.median_after,
                    ratio=sp.ratio,
                    ratio_ci=_ratio_ci(
                        values[bounds[k] : sp.index],
                        values[sp.index : bounds[k + 2]],
                        settings.seed,
                    ),
                    p_value=sp.p_value,
                    n_before=sp.n_before,
                    n_after=sp.n_after,
                    min_effect=min_effect,
                    reports_before=[p.envelope_sha256 for p in before],
                    reports_after=[p.envelope_sha256 for p in after],
                    culprit=culprit(before, after, settings.min_points),
                    operators=operator_diff(before, after),
                    load=load_either_side(before, after),
                    machine=machine_evidence(
                        [machine_readings(p.report.predicate) for p in before],
                        [machine_readings(p.report.predicate) for p in after],
                        worse=_worse(sp.median_before, sp.median_after, fig.better),
                        directed=fig.kind in DIRECTED_KINDS,
                    ),
                )
            )
    return out


def _worse(before: float, after: float, better: str) -> bool:
    if after == before:
        return False
    return (after > before) if better == "lower" else (after < before)


def _same_change(a: Change, b: Change) -> bool:
    if (a.model, a.preset, a.figure) != (b.model, b.preset, b.figure) or a.worse != b.worse:
        return False
    if a.first_after.get("fleet_run") and a.first_after["fleet_run"] == b.first_after.get(
        "fleet_run"
    ):
        return True
    ta = dt.datetime.strptime(a.first_after["measured_at"], "%Y-%m-%dT%H:%M:%SZ")
    tb = dt.datetime.strptime(b.first_after["measured_at"], "%Y-%m-%dT%H:%M:%SZ")
    return abs(ta - tb) <= SAME_CHANGE_WINDOW


@dataclass
class ChangeReport:
    """Every series analysed, its changes, and the settings they were found with."""

    series: list[Series]
    changes: list[Change]
    settings: ChangeSettings
    noise: list = field(default_factory=list)
    """Each series' noise score (:func:`series_noise`), where it has enough runs."""

    def too_noisy(self) -> dict[str, str]:
        """Boards too noisy for the latency minimum effect: name → why (first series)."""
        out: dict[str, str] = {}
        for n in self.noise:
            if n.too_noisy:
                out.setdefault(n.device, n.message())
        return out

    @property
    def gap_count(self) -> int:
        """Runs left out of every series (failed, inconclusive or incomplete)."""
        return sum(len(s.gaps) for s in self.series)

    def gaps_by_status(self) -> dict[str, int]:
        """How many runs of each status were left out of the series, in :data:`GAP_STATUSES`
        order (a status with none is absent)."""
        counts = {status: 0 for status in GAP_STATUSES}
        for s in self.series:
            for g in s.gaps:
                counts[g["status"]] = counts.get(g["status"], 0) + 1
        return {k: v for k, v in counts.items() if v}

    def to_json(self) -> dict:
        """The analysis as JSON."""
        return {
            "settings": self.settings.to_json(),
            "series": [s.to_json() for s in self.series],
            "gaps": self.gap_count,
            "gaps_by_status": self.gaps_by_status(),
            "changes": [c.to_json() for c in self.changes],
            "noise": [n.to_json() for n in self.noise],
        }


def find_changes(
    rows: Iterable[Mapping],
    settings: ChangeSettings | None = None,
    noise_min_effect: float | None = None,
) -> ChangeReport:
    """Change points on every series of ``rows`` (``History.runs``), the boards sharing each.
    Each series' noise score is judged against ``noise_min_effect`` (default: the
    settings' latency minimum effect)."""
    settings = settings or ChangeSettings()
    judged_against = (
        settings.min_effect["latency"] if noise_min_effect is None else noise_min_effect
    )
    series = build_series(rows)
    changes = [c for s in series for c in series_changes(s, settings)]
    for c in changes:
        c.boards = sorted({o.device for o in changes if _same_change(c, o)})
    changes.sort(key=lambda c: (c.first_after["measured_at"] or "", c.model, c.figure, c.device))
    noise = []
    for s in series:
        own = [c for c in changes if (c.device, c.model, c.preset) == s.key[:2] + (s.preset,)]
        score = series_noise(s, own, judged_against)
        if score is not None:
            noise.append(score)
            if score.too_noisy:
                for c in own:
                    c.too_noisy = score.message()
    return ChangeReport(series, changes, settings, noise)


# -- noise scores (docs: host/lab/noise.py) ---------------------------------------

MIN_RUNS = 5
"""Fewest runs for a score: a CV of fewer says nothing."""
SPREAD_FACTOR = 3.0
"""Too noisy when CV × this exceeds the minimum effect."""


@dataclass(frozen=True)
class NoiseScore:
    """One board × model × preset: the CV of its clean p50, its interval, and the verdict."""

    device: str
    model: str
    preset: str | None
    figure: str
    cv: float
    cv_ci: tuple[float, float]
    runs: int
    min_effect: float
    too_noisy: bool
    segments: int = 1
    """How many stretches between changes of the figure the runs came from."""

    def message(self) -> str:
        """'pi5-c is too noisy for a 10 % limit: CV 6.1 %' (or fine for it)."""
        verdict = "too noisy" if self.too_noisy else "quiet enough"
        return (
            f"{self.device} is {verdict} for a {self.min_effect * 100:g} % limit: CV {self.cv:.1%} "
            f"(95 % CI {self.cv_ci[0]:.1%}–{self.cv_ci[1]:.1%}, {self.runs} runs of {self.model}"
            + (f" in {self.segments} stretches between changes)" if self.segments > 1 else ")")
        )

    def to_json(self) -> dict:
        """JSON-ready fields, with the message."""
        return {**asdict(self), "cv_ci": list(self.cv_ci), "message": self.message()}


def pooled_cv_with_interval(
    segments, *, iterations: int = 2000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """The pooled within-segment CV of ``segments`` (each a run of values with its own
    level) and its 95 % percentile-bootstrap interval: each value taken relative to its
    segment's mean, ``sqrt(Σ (x / mean − 1)² / (n − k))`` over the n values of the k
    segments (one degree of freedom spent on each mean). One segment: the sample CV."""
    rel = np.concatenate([np.asarray(x, dtype=np.float64) / np.mean(x) - 1.0 for x in segments])
    dof = rel.size - len(segments)
    cv = float(np.sqrt(np.sum(rel**2) / dof))
    rng = np.random.default_rng(seed)
    boot = rel[rng.integers(0, rel.size, size=(iterations, rel.size))]
    cvs = np.sqrt(np.sum(boot**2, axis=1) / dof)
    lo, hi = np.quantile(cvs, [0.025, 0.975])
    return cv, (float(lo), float(hi))


def series_noise(series, changes, min_effect: float) -> NoiseScore | None:
    """The noise score of one :class:`~.changes.Series` given its changes: the spread of its
    clean p50 within the segments its changes of that figure cut it into (a real change is
    not noise, and every segment's runs count), over the segments of at least two runs;
    None with fewer than :data:`MIN_RUNS` such runs."""
    p50 = None
    values: list[tuple[int, float]] = []
    for i, point in enumerate(series.points):
        for fig, value in figures_of(point.report.predicate).items():
            if fig.kind == "latency" and (p50 is None or fig == p50):
                p50 = fig
                values.append((i, value))
                break
    if p50 is None:
        return None
    cuts = sorted({c.index for c in changes if c.figure == p50.name and c.device == series.device})
    bounds = [0, *cuts, len(series.points)]
    segments = [
        kept
        for lo, hi in zip(bounds, bounds[1:])
        if len(kept := [v for i, v in values if lo <= i < hi]) >= 2 and np.mean(kept) > 0
    ]
    runs = sum(len(x) for x in segments)
    if runs < MIN_RUNS:
        return None
    cv, ci = pooled_cv_with_interval(segments)
    return NoiseScore(
        device=series.device,
        model=series.model,
        preset=series.preset,
        figure=p50.name,
        cv=cv,
        cv_ci=ci,
        runs=runs,
        segments=len(segments),
        min_effect=min_effect,
        too_noisy=cv * SPREAD_FACTOR > min_effect,
    )
