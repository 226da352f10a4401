"""``edgequal compare A B [C…]``: the figures of several reports side by side.

The first report is the reference: every other column shows its value, the change
from the reference, each figure's SAME / DIFFERENT / UNKNOWN against it (verdict.py), and
what differs in the fingerprint.

Verdicts compare runs, never calls (docs/gating.md "Verdicts: the unit is the run"): the
first shape's clean p50 and p99 and the sustained throughput by every run of a
``--repeat N`` report (run_figures.py; the row shows the runs' median), every other figure
by the one run a report is. The spread is the repeats', or the board's noise from
history (``compare --history``) for the first shape's p50; with neither, one run a side is
UNKNOWN. Beside a latency verdict, the median ratio of the two first runs' calls with its
bootstrap interval: those runs' own precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgequal.contract.preemption import decisive_entry

from .baseline import compare_latency, fingerprint_changes
from .conditions import edge_shapes, mb
from .pipeline_checks import PART_LABELS, PATH_PARTS, part_summary, worst_preprocessing_abs
from .policy import BASELINE_DEFAULTS
from .report_file import ReportFile
from .run_figures import RunFigures, fastest_call_ms, run_figures
from .runtime_envs import drift_between, env_entry, env_names, env_pair, env_shape
from .verdict import Spread

_MB = 1 << 20


@dataclass
class Row:
    """One figure across the reports: values, relative change from the first, significance."""

    figure: str
    unit: str
    values: list[float | None]
    # "lower" or "higher" is better; None when neither (informational).
    better: str | None = "lower"
    deltas: list[float | None] = field(default_factory=list)
    significance: list[str | None] = field(default_factory=list)
    # Each column against the first: SAME, DIFFERENT or UNKNOWN (host/judge/verdict.py).
    verdicts: list[dict | None] = field(default_factory=list)

    def to_json(self) -> dict:
        """JSON-ready fields; ``verdict`` is the last column's (the candidate's with two)."""
        return {
            "figure": self.figure,
            "unit": self.unit,
            "better": self.better,
            "values": self.values,
            "deltas": self.deltas,
            "significance": self.significance,
            "verdict": self.verdicts[-1]["verdict"]
            if self.verdicts and self.verdicts[-1]
            else None,
            "verdicts": self.verdicts,
        }


@dataclass
class Comparison:
    """Reports, the rows of figures, and each report's fingerprint changes from the first."""

    reports: list[ReportFile]
    rows: list[Row]
    fingerprint_changes: list[list[dict]]

    def to_json(self) -> dict:
        """The comparison as JSON."""
        return {
            "reports": [
                {
                    "path": str(r.path),
                    "label": r.label,
                    "run_id": r.predicate.get("run_id"),
                    "status": r.predicate.get("status"),
                    "reason": r.predicate.get("reason"),
                    "verified": r.verified,
                    "signature": r.signature,
                }
                for r in self.reports
            ],
            "rows": [row.to_json() for row in self.rows],
            "fingerprint_changes": self.fingerprint_changes,
        }


# (row, unit, path under results, which way is better) for the service scenarios and energy.
SCENARIO_FIGURES: tuple[tuple[str, str, tuple[str, ...], str | None], ...] = (
    ("batch: best items/s", "/s", ("batch_sweep", "best", "items_per_s"), "higher"),
    ("batch: best batch size", "", ("batch_sweep", "best", "batch"), None),
    (
        "batch: best items/s per core",
        "/s",
        ("batch_sweep", "best", "items_per_s_per_core"),
        "higher",
    ),
    ("threads: recommended", "", ("thread_scaling", "recommended", "threads"), None),
    (
        "threads: calls/s at recommended",
        "/s",
        ("thread_scaling", "recommended", "calls_per_s"),
        "higher",
    ),
    ("server: highest rate with p99 in bound", "/s", ("server", "max_rate_held_per_s"), "higher"),
    ("server: p99 at target (queueing incl.)", "ms", ("server", "at_target", "p99_ms"), "lower"),
    ("server: capacity", "/s", ("server", "capacity_per_s"), "higher"),
    (
        "operators: profiled time per inference",
        "µs",
        ("operators", "profile", "total_us_per_run"),
        "lower",
    ),
    ("energy: board power", "W", ("sustained", "power", "summary", "power_w_median"), "lower"),
    (
        "energy per inference",
        "mJ",
        ("sustained", "power", "summary", "mj_per_inference_median"),
        "lower",
    ),
    (
        "energy per inference above idle",
        "mJ",
        ("sustained", "power", "summary", "mj_per_inference_above_idle_median"),
        "lower",
    ),
)


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _per_shape(r: ReportFile) -> dict[str, dict]:
    """Each latency shape as judged: its clean figures where they decide (measure/preemption.py)."""
    entries = _get(r.predicate, "results", "latency", "per_shape") or []
    return {e.get("shape"): decisive_entry(e) for e in entries}


def _coload(r: ReportFile, shape: str) -> dict | None:
    """The co-load measurement of one latency shape, or None (no co-load declared)."""
    co = _get(_per_shape(r).get(shape), "coload")
    return co if isinstance(co, dict) else None


def _edge(r: ReportFile, label: str) -> dict | None:
    """One edge shape's entry by its label, or None."""
    results = _get(r.predicate, "results") or {}
    return next((e for e in edge_shapes(results) if e.get("label") == label), None)


def _edge_figure(r: ReportFile, label: str, *path: str) -> float | None:
    """A figure of an edge shape that ran (a shape that did not run has none)."""
    entry = _edge(r, label)
    return _get(entry, *path) if entry and entry.get("ok") else None


def _significance(cmp: dict) -> str | None:
    """The verdict's line (ratio, interval, runs, spread and its source, why), then the two
    first runs' calls: their median ratio and its interval (their own precision)."""
    three = cmp.get("three_way")
    if not three:
        return None
    text = three["text"]
    r = cmp.get("median_ratio") or {}
    if r.get("ci_low") is not None:
        text += f"; the runs' calls ×{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
    return text


def _runtime_env_rows(reports: list[ReportFile], add) -> list[tuple[Row, str]]:
    """Per runtime environment any report measured: p50, p99, cold load, its ratio to its
    own run's baseline and the flips between them; returns the p50 rows (for significance)."""
    names: list[str] = []
    for r in reports:
        for name in env_names(_get(r.predicate, "results") or {}):
            if name not in names:
                names.append(name)
    p50_rows = []

    def shape(r, name):
        return env_shape(env_entry(_get(r.predicate, "results") or {}, name))

    def pair(r, name):
        return env_pair(_get(r.predicate, "results") or {}, name)

    for name in names:
        row = add(f"env {name} p50", "ms", lambda r, n=name: _get(shape(r, n), "summary", "p50_ms"))
        p50_rows.append((row, name))
        add(f"env {name} p99", "ms", lambda r, n=name: _get(shape(r, n), "summary", "p99_ms"))
        add(
            f"env {name} cold load (median)",
            "ms",
            lambda r, n=name: _get(
                env_entry(_get(r.predicate, "results") or {}, n), "cold_load", "total_ms", "median"
            ),
        )
        add(
            f"env {name} p50 / its run's baseline p50",
            "×",
            lambda r, n=name: _get(pair(r, n), "p50_ratio"),
        )
        add(
            f"env {name} flips against its run's baseline",
            "",
            lambda r, n=name: _get(pair(r, n), "flips_between"),
        )
        add(
            f"env {name} max abs output difference from its run's baseline",
            "",
            lambda r, n=name: drift_between(pair(r, n) or {})["drift_between_max_abs"],
        )
        add(
            f"env {name} PSNR against its run's baseline",
            "dB",
            lambda r, n=name: drift_between(pair(r, n) or {})["drift_between_psnr_db"],
            better="higher",
        )
    return p50_rows


def kernel_path_rows(reports: list[ReportFile], add) -> None:
    """Per kernel path any report ran (docs/divergence.md): its p50, its max abs drift
    against the golden outputs, and one row per first divergent node a report named (the
    value: the node's place in topological order)."""
    from .kernel_paths import first_divergent_nodes

    names: list[str] = []
    for r in reports:
        for entry in (_get(r.predicate, "results", "kernel_paths") or {}).get("paths", []):
            if entry["status"] == "ok" and entry["name"] not in names:
                names.append(entry["name"])

    def entry_of(r, name):
        paths = (_get(r.predicate, "results", "kernel_paths") or {}).get("paths", [])
        return next((e for e in paths if e["name"] == name and e["status"] == "ok"), None)

    for name in names:
        add(f"path {name} p50", "ms", lambda r, n=name: _get(entry_of(r, n), "latency", "p50_ms"))
        add(
            f"path {name} max abs against the golden outputs",
            "",
            lambda r, n=name: _get(entry_of(r, n), "drift", "max_abs"),
        )
    named: list[tuple[str, str]] = []
    for r in reports:
        for where, node in first_divergent_nodes(_get(r.predicate, "results") or {}).items():
            if (where, node) not in named:
                named.append((where, node))

    def index_of(r, where, node):
        results = _get(r.predicate, "results") or {}
        if first_divergent_nodes(results).get(where) != node:
            return None
        if where == "model":
            return _get(results, "divergence", "localization", "index")
        return _get(entry_of(r, where), "divergence", "localization", "index")

    for where, node in named:
        add(
            f"{'the model' if where == 'model' else 'path ' + where}: first divergent node "
            f"{node}, its place in the graph",
            "",
            lambda r, w=where, n=node: index_of(r, w, n),
            better=None,
        )


def compare_reports(
    reports: list[ReportFile], settings: dict | None = None, prior: Spread | None = None
) -> Comparison:
    """Rows of figures for ``reports`` (the first is the reference); ``prior``: the board's
    run-to-run spread of the clean p50 from history (the first shape's p50 verdicts)."""
    settings = {**BASELINE_DEFAULTS, **(settings or {})}
    rows: list[Row] = []
    # Row → (figure, shape) of the rows whose values are per run (run_figures.py).
    per_run: dict[int, tuple[str, str | None]] = {}

    def add(figure: str, unit: str, getter, better: str | None = "lower") -> Row:
        values = [getter(r) for r in reports]
        row = Row(figure, unit, values, better)
        rows.append(row)
        return row

    cold_keys = (
        ("total_ms", "cold load total (median)"),
        ("first_inference_ms", "first inference (median)"),
    )
    for key, label in cold_keys:
        add(label, "ms", lambda r, k=key: _get(r.predicate, "results", "cold_load", k, "median"))

    shapes: list[str] = []
    for r in reports:
        for shape in _per_shape(r):
            if shape not in shapes:
                shapes.append(shape)
    latency_rows: list[tuple[Row, str]] = []
    for shape in shapes:
        for key, label in (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99")):
            if key == "p90_ms":
                getter = lambda r, s=shape, k=key: _get(_per_shape(r).get(s), "summary", k)  # noqa: E731
            else:  # of repeated runs, their median (the verdict weighs each)
                getter = lambda r, s=shape, k=key: run_figures(r.predicate, k, s).median  # noqa: E731
            row = add(f"latency {label} {shape}", "ms", getter)
            if key != "p90_ms":
                per_run[id(row)] = (key, shape)
            if key == "p50_ms":
                latency_rows.append((row, shape))
        add(
            f"latency CV {shape}",
            "",
            lambda r, s=shape: _get(_per_shape(r).get(s), "summary", "cv"),
        )

    # Beside the declared co-load: the same shape's figures, and co-load / plain.
    coload_rows: list[tuple[Row, str]] = []
    for shape in shapes:
        for key, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
            row = add(
                f"co-load {label} {shape}",
                "ms",
                lambda r, s=shape, k=key: _get(_coload(r, s), "summary", k),
            )
            if key == "p50_ms":
                coload_rows.append((row, shape))
        for key, label in (("p50_ratio", "p50"), ("p99_ratio", "p99")):
            add(
                f"co-load {label} / plain {label} {shape}",
                "×",
                lambda r, s=shape, k=key: _get(_coload(r, s), k),
            )

    env_rows = _runtime_env_rows(reports, add)
    kernel_path_rows(reports, add)

    for key, label, unit, better in (
        ("peak_per_s", "sustained peak", "/s", "higher"),
        ("sustained_per_s", "sustained throughput", "/s", "higher"),
        ("stability", "stability", "", "higher"),
        ("peak_temp_c", "peak temperature", "°C", "lower"),
    ):
        if key == "sustained_per_s":
            row = add(
                label, unit, lambda r: run_figures(r.predicate, "sustained_per_s").median, better
            )
            per_run[id(row)] = ("sustained_per_s", None)
            continue
        add(label, unit, lambda r, k=key: _get(r.predicate, "results", "sustained", k), better)

    outputs: list[str] = []
    for r in reports:
        for name in _get(r.predicate, "results", "drift", "outputs") or {}:
            if name not in outputs:
                outputs.append(name)
    for name in outputs:
        add(
            f"drift max abs {name}",
            "",
            lambda r, n=name: _get(r.predicate, "results", "drift", "outputs", n, "max_abs"),
        )
        add(
            f"drift PSNR {name}",
            "dB",
            lambda r, n=name: _get(r.predicate, "results", "drift", "outputs", n, "psnr_db"),
            "higher",
        )
    if any(_get(r.predicate, "results", "drift", "decisions") for r in reports):
        add(
            "decision flips",
            "",
            lambda r: _get(r.predicate, "results", "drift", "decisions", "flip_count"),
        )
        add(
            "flips near threshold",
            "",
            lambda r: _get(
                r.predicate, "results", "drift", "decisions", "flips_near_threshold_count"
            ),
        )

    def peak_mb(r):
        v = _get(r.predicate, "results", "memory", "peak_rss_bytes")
        return None if v is None else v / _MB

    add("peak RSS", "MB", peak_mb)

    # Edges of the input range: per label, how many ran, latency and memory.
    labels: list[str] = []
    for r in reports:
        for entry in edge_shapes(_get(r.predicate, "results") or {}):
            if entry.get("label") not in labels:
                labels.append(entry.get("label"))
    if labels:
        add(
            "edge shapes that ran",
            "",
            lambda r: (
                sum(1 for e in edge_shapes(_get(r.predicate, "results") or {}) if e.get("ok"))
                if _get(r.predicate, "results", "edge_shapes")
                else None
            ),
            "higher",
        )
    for label in labels:
        for key, name in (("p50_ms", "p50"), ("p99_ms", "p99")):
            add(
                f"edge {label} {name}",
                "ms",
                lambda r, lb=label, k=key: _edge_figure(r, lb, "summary", k),
            )
        add(
            f"edge {label} peak RSS",
            "MB",
            lambda r, lb=label: mb(_edge_figure(r, lb, "peak_rss_bytes")),
        )

    # The whole path from raw files: each stage's p50 and the end-to-end p50 and p99.
    if any(_get(r.predicate, "results", "pipeline", "end_to_end") for r in reports):
        for part in PATH_PARTS:
            for key, name in (("p50_ms", "p50"),) + (
                (("p99_ms", "p99"),) if part == "end_to_end" else ()
            ):
                add(
                    f"path {PART_LABELS[part]} {name}",
                    "ms",
                    lambda r, pt=part, k=key: _get(
                        part_summary(_get(r.predicate, "results", "pipeline") or {}, pt), k
                    ),
                )
        add(
            "preprocessing max abs vs reference",
            "",
            lambda r: worst_preprocessing_abs(_get(r.predicate, "results", "pipeline") or {})[1],
        )

    # The service scenarios and energy: each one's headline figure.
    for label, unit, path, better in SCENARIO_FIGURES:
        add(label, unit, lambda r, p=path: _get(r.predicate, "results", *p), better)

    for row in rows:
        ref = row.values[0]
        row.deltas = [
            None if i == 0 or v is None or not ref else (v - ref) / ref
            for i, v in enumerate(row.values)
        ]
        row.significance = [None] * len(reports)
    first_shape = shapes[0] if shapes else None
    for row, shape in latency_rows:
        ref_entry = _per_shape(reports[0]).get(shape)
        for i, r in enumerate(reports[1:], start=1):
            entry = _per_shape(r).get(shape)
            if ref_entry and entry:
                cmp = compare_latency(
                    ref_entry,
                    entry,
                    settings,
                    base_runs=run_figures(reports[0].predicate, "p50_ms", shape),
                    cand_runs=run_figures(r.predicate, "p50_ms", shape),
                    prior=prior if shape == first_shape else None,
                )
                row.significance[i] = _significance(cmp)
    for row, shape in coload_rows:
        ref_co = _coload(reports[0], shape)
        for i, r in enumerate(reports[1:], start=1):
            co = _coload(r, shape)
            if ref_co and co:
                row.significance[i] = _significance(compare_latency(ref_co, co, settings))
    for row, name in env_rows:
        ref_entry = env_shape(env_entry(_get(reports[0].predicate, "results") or {}, name))
        for i, r in enumerate(reports[1:], start=1):
            entry = env_shape(env_entry(_get(r.predicate, "results") or {}, name))
            if ref_entry and entry:
                row.significance[i] = _significance(compare_latency(ref_entry, entry, settings))
    _add_verdicts(reports, rows, per_run, first_shape, settings, prior)
    # Keep only rows with at least one value.
    rows = [row for row in rows if any(v is not None for v in row.values)]
    changes = [[]] + [fingerprint_changes(reports[0], r) for r in reports[1:]]
    return Comparison(reports, rows, changes)


def _add_verdicts(reports, rows, per_run, first_shape, settings, prior: Spread | None) -> None:
    """SAME / DIFFERENT / UNKNOWN per figure and column against the first report, run
    against run: every run of a repeated report for the per-run figures (``per_run``),
    else the one value each report is (UNKNOWN unless equal, or beyond a known spread).
    The board's history noise is the spread only of the first shape's p50 (its figure)."""
    from .verdict import decide

    min_effect = settings["min_effect"]
    for row in rows:
        row.verdicts = [None] * len(reports)
        for i in range(1, len(reports)):
            a, b = row.values[0], row.values[i]
            if a is None or b is None or not isinstance(a, (int, float)):
                continue
            ra, rb = RunFigures([a], [_run_id(reports[0])]), RunFigures([b], [_run_id(reports[i])])
            figure, shape = per_run.get(id(row), (None, None))
            if figure is not None:
                ra = run_figures(reports[0].predicate, figure, shape) or ra
                rb = run_figures(reports[i].predicate, figure, shape) or rb
            own = prior if figure == "p50_ms" and shape == first_shape else None
            floors = None
            if figure == "p50_ms":
                entries = (_per_shape(reports[0]).get(shape), _per_shape(reports[i]).get(shape))
                floors = tuple(fastest_call_ms(e) for e in entries)
            v = decide(
                ra.values,
                rb.values,
                min_effect,
                settings,
                prior=own,
                baseline_runs=ra.run_ids,
                candidate_runs=rb.run_ids,
                floors=floors,
            )
            row.verdicts[i] = v.to_json()
            if figure is not None and row.significance[i] is None:
                row.significance[i] = v.text()


def _run_id(r: ReportFile) -> str:
    return str(r.predicate.get("run_id") or r.label)
