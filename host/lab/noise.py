"""How noisy a board is for a model: the run-to-run spread of its clean p50, from history
(:func:`series_noise`).

A board's **noise score** for one model (one series of ``host/lab/series.py``) is the
coefficient of variation of the clean p50 of its first input shape, pooled within the
stretches the series' change points of that figure cut it into (a real change is not
noise; every stretch's runs count), with a 95 % percentile-bootstrap interval (seeded). A board is **too noisy** for a
minimum effect when ``CV × 3 > min_effect``: three standard deviations of night-to-night
spread would pass for a change of that size, so a change of that size cannot be told from
noise there ("pi5-c is too noisy for a 10 % limit: CV 6.1 %").

``history changes`` lists every series' score; ``fleet run --skip-noisy`` leaves a board
out of the run when it is too noisy for any model the run would measure on it
(``board_noise.py``: a board's scores read from its history).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .series import figures_of

NOISY_PREFIX = "too noisy: "
"""How an ``unhealthy`` reason from ``fleet run --skip-noisy`` begins."""


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
    session_tail: float | None = None
    """How far apart two of the series' runs fall, at most, but for 1 % of pairs: the 99th
    percentile of ``|log(x_i / x_j)|`` within its stretches (:func:`pair_tail`)."""

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


TAIL_LEVEL = 0.99
"""The share of the history's run pairs a session-to-session tail holds (the verdict's
99 % level for DIFFERENT, host/judge/verdict.py)."""
TAIL_RUNS = 300
"""The newest runs a tail is read from (their pairs: 44,850)."""


def pair_tail(segments, level: float = TAIL_LEVEL) -> float | None:
    """The ``level`` quantile of ``|log(x_i / x_j)|`` over every pair of runs, each run taken
    against its own stretch's median (a real change is not noise): how far two sessions of
    the board fall apart, tails and all. A CV assumes a normal spread; a board's sessions
    need not be normal (on the shared VM the benchmarks ran on, about one run in 50 to 150
    was 30–80 % slower in every call: docs/gating.md "Confirming a regression"), a tail no
    CV carries. The
    newest :data:`TAIL_RUNS` runs; None with fewer than two."""
    logs = [np.log(np.asarray(x, dtype=np.float64)) for x in segments]
    dev = np.concatenate([x - np.median(x) for x in logs if x.size])[-TAIL_RUNS:]
    if dev.size < 2:
        return None
    i, j = np.triu_indices(dev.size, k=1)
    return float(np.quantile(np.abs(dev[i] - dev[j]), level))


def series_noise(series, changes, min_effect: float) -> NoiseScore | None:
    """The noise score of one :class:`~.series.Series` given its changes: the spread of its
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
        session_tail=pair_tail(segments),
    )
