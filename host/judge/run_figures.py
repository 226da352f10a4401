"""One figure per run of a report: what every verdict between runs compares
(host/judge/verdict.py; docs/gating.md "Verdicts: the unit is the run").

A report of ``qualify --repeat N`` holds N runs (``results.repeats.runs[].figures``: the
first input shape's clean p50 and p99, the sustained throughput); every other report is
one run, its figures those of ``results``. A run's calls are never the runs: they give
that run's own interval (its ``p50_ci_ms``), not the evidence another run would agree.
Cold load is one figure per report (the median of its fresh workers, which share the
run's conditions), as are the figures of other input shapes, which runs 2..N do not keep.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgequal.contract.preemption import decisive_summary

RUN_FIGURES = ("p50_ms", "p99_ms", "sustained_per_s", "cold_load_ms", "first_inference_ms")
"""The figures a report gives per run."""


@dataclass(frozen=True)
class RunFigures:
    """One figure's value in each run of a report, with each run's id (``RUN/k`` for the
    k-th of repeated runs)."""

    values: list[float]
    run_ids: list[str]

    def __len__(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float | None:
        """The runs' median (the value a table shows for a repeated report), or None."""
        if not self.values:
            return None
        v = sorted(self.values)
        n = len(v)
        return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return {"values": self.values, "run_ids": self.run_ids}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _one(run_id: str, value) -> RunFigures:
    return RunFigures([float(value)], [run_id]) if _number(value) else RunFigures([], [])


def _shapes(results: dict) -> list[dict]:
    return ((results.get("latency") or {}).get("per_shape")) or []


def run_figures(predicate: dict, figure: str, shape: str | None = None) -> RunFigures:
    """``figure`` (one of :data:`RUN_FIGURES`) in every run of a report; for latency, of
    ``shape`` (None: the first input shape). Empty when the report did not measure it."""
    if figure not in RUN_FIGURES:
        raise ValueError(f"no per-run figure {figure!r}; one of {', '.join(RUN_FIGURES)}")
    results = predicate.get("results") or {}
    run_id = str(predicate.get("run_id") or "run")
    if figure in ("cold_load_ms", "first_inference_ms"):
        key = "total_ms" if figure == "cold_load_ms" else "first_inference_ms"
        return _one(run_id, ((results.get("cold_load") or {}).get(key) or {}).get("median"))
    shapes = _shapes(results)
    first = shapes[0].get("shape") if shapes else None
    if figure in ("p50_ms", "p99_ms") and shape is not None and shape != first:
        entry = next((e for e in shapes if e.get("shape") == shape), None)
        return _one(run_id, decisive_summary(entry).get(figure) if entry else None)
    runs = ((results.get("repeats") or {}).get("runs")) or []
    values = [(r.get("figures") or {}).get(figure) for r in runs if isinstance(r, dict)]
    if len(values) >= 2 and all(_number(v) for v in values):
        ids = [f"{run_id}/{r.get('run', i + 1)}" for i, r in enumerate(runs)]
        return RunFigures([float(v) for v in values], ids)
    if figure == "sustained_per_s":
        return _one(run_id, (results.get("sustained") or {}).get("sustained_per_s"))
    return _one(run_id, decisive_summary(shapes[0]).get(figure) if shapes else None)


def fastest_call_ms(entry: dict | None) -> float | None:
    """One input shape's fastest timed call (ms; the calls that decide, as its p50): where a
    report is one run, what tells a slow session from a slower model (verdict.py
    ``FLOOR_SHARE``)."""
    value = decisive_summary(entry).get("min_ms") if entry else None
    return float(value) if _number(value) and value > 0 else None


def segment_figures(shape_entry: dict | None, run_id: str = "run") -> RunFigures:
    """The p50 (ms) of each timed segment of a runtime environment's shape (ABBA segments,
    agent/phases/runtime_envs.py): the units a side-by-side comparison weighs, each
    segment alternating with the other environment's in the same run."""
    segments = (shape_entry or {}).get("segments") or []
    values = [s.get("p50_ms") for s in segments if isinstance(s, dict)]
    values = [float(v) for v in values if _number(v) and v > 0]
    return RunFigures(values, [f"{run_id}/segment {i + 1}" for i in range(len(values))])
