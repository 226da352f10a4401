"""A lab's history as series: one board × model × plan preset, its runs in order, the
figures each run gives.

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
inference where measured. ``host/lab/changes.py`` finds where each figure changed.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from edgequal.contract.preemption import decisive_entry

from ..judge.report_file import ReportFile, decoded_report

GAP_STATUSES = ("failed", "inconclusive", "incomplete")
"""Statuses whose runs are never points of a series, each shown as a gap of its status:
a failed run's figures are not the model's on a working board, an inconclusive run's are
the interference's, an incomplete run's are missing. (Not 0, and not a figure.)"""

_MB = 1 << 20


def value_at(d: Any, *path: str) -> Any:
    """``d[path[0]][path[1]]...``, or None where a step is missing or not a dict."""
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def finite_number(value: Any) -> float | None:
    """A finite int or float as float; None for anything else (bool, NaN, text)."""
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
        if isinstance(spread.get(k), dict) and finite_number(spread[k].get("median")) is not None
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
    for i, entry in enumerate(value_at(results, "latency", "per_shape") or []):
        shape = entry.get("shape") or "default"
        summary = {**(decisive_entry(entry).get("summary") or {}), **(medians if i == 0 else {})}
        out[Figure(f"p50 {shape}", "ms", "latency")] = finite_number(summary.get("p50_ms"))
        out[Figure(f"p99 {shape}", "ms", "tail")] = finite_number(summary.get("p99_ms"))
    sustained = results.get("sustained") or {}
    out[Figure("sustained throughput", "/s", "throughput", "higher")] = finite_number(
        medians.get("sustained_per_s", sustained.get("sustained_per_s"))
    )
    out[Figure("stability", "", "stability", "higher")] = finite_number(sustained.get("stability"))
    out[Figure("energy per inference", "mJ", "energy")] = finite_number(
        value_at(sustained, "power", "summary", "mj_per_inference_median")
    )
    out[Figure("cold load", "ms", "cold")] = finite_number(
        value_at(results, "cold_load", "total_ms", "median")
    )
    out[Figure("first inference", "ms", "cold")] = finite_number(
        value_at(results, "cold_load", "first_inference_ms", "median")
    )
    for name, drift in sorted((value_at(results, "drift", "outputs") or {}).items()):
        out[Figure(f"drift {name}", "", "drift")] = finite_number(value_at(drift, "max_abs"))
    labelled = value_at(results, "drift", "labelled") or {}
    classification = labelled.get("task", "classification") == "classification"
    if labelled.get("cases") and classification:  # the device's top-1, in percent
        rows = labelled["cases"]
        top1 = sum(1 for r in rows if r.get("device", [])[:1] == [r.get("label")])
        out[Figure("accuracy top-1", "%", "accuracy", "higher")] = 100 * top1 / len(rows)
    elif labelled.get("cases"):  # detection mAP, mean IoU, VAD frame F1: in percent
        from ..task_scores import NAMES, device_headline

        headline = device_headline(labelled)
        if headline is not None:
            name, value = headline
            out[Figure(f"accuracy {NAMES[name]}", "%", "accuracy", "higher")] = 100 * value
    rss = finite_number(value_at(results, "memory", "peak_rss_bytes"))
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
    for i, env in enumerate(value_at(results, "runtime_envs", "environments") or [], start=1):
        if not isinstance(env, Mapping) or env.get("status") != "ok":
            continue
        tag = f" (runtime env {i})"
        shapes = value_at(env, "latency", "per_shape") or [{}]
        shape = shapes[0].get("shape") or "default"
        summary = shapes[0].get("summary") or {}
        out[Figure(f"p50 {shape}{tag}", "ms", "latency")] = finite_number(summary.get("p50_ms"))
        out[Figure(f"p99 {shape}{tag}", "ms", "tail")] = finite_number(summary.get("p99_ms"))
        out[Figure(f"cold load{tag}", "ms", "cold")] = finite_number(
            value_at(env, "cold_load", "total_ms", "median")
        )
        for name, drift in sorted((value_at(env, "drift", "outputs") or {}).items()):
            out[Figure(f"drift {name}{tag}", "", "drift")] = finite_number(
                value_at(drift, "max_abs")
            )
    return out


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
