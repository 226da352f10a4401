"""How noisy a board is for a model: the run-to-run spread of its clean p50, from history.

A board's **noise score** for one model (one series of ``host/lab/changes.py``) is the
coefficient of variation (sample standard deviation / mean) of the clean p50 of its first
input shape over the runs since the series' last change point (a real change is not
noise), with a 95 % percentile-bootstrap interval (seeded). A board is **too noisy** for a
minimum effect when ``CV × 3 > min_effect``: three standard deviations of night-to-night
spread would pass for a change of that size, so a change of that size cannot be told from
noise there ("pi5-c is too noisy for a 10 % limit: CV 6.1 %").

``history changes`` lists every series' score; ``fleet run --skip-noisy`` leaves a board
out of the run when it is too noisy for any model the run would measure on it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

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

    def message(self) -> str:
        """'pi5-c is too noisy for a 10 % limit: CV 6.1 %' (or fine for it)."""
        verdict = "too noisy" if self.too_noisy else "quiet enough"
        return (
            f"{self.device} is {verdict} for a {self.min_effect * 100:g} % limit: CV {self.cv:.1%} "
            f"(95 % CI {self.cv_ci[0]:.1%}–{self.cv_ci[1]:.1%}, {self.runs} runs of {self.model})"
        )

    def to_json(self) -> dict:
        """JSON-ready fields, with the message."""
        return {**asdict(self), "cv_ci": list(self.cv_ci), "message": self.message()}


def cv_with_interval(
    values, *, iterations: int = 2000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """The CV of ``values`` and its 95 % percentile-bootstrap interval."""
    x = np.asarray(values, dtype=np.float64).ravel()
    cv = float(np.std(x, ddof=1) / np.mean(x))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(iterations, x.size))
    boot = x[idx]
    cvs = np.std(boot, axis=1, ddof=1) / np.mean(boot, axis=1)
    lo, hi = np.quantile(cvs, [0.025, 0.975])
    return cv, (float(lo), float(hi))


def series_noise(series, changes, min_effect: float) -> NoiseScore | None:
    """The noise score of one :class:`~.changes.Series` given its changes (those of its
    clean p50 bound the runs used); None with fewer than :data:`MIN_RUNS` runs."""
    from .changes import figures_of

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
    start = max(
        (c.index for c in changes if c.figure == p50.name and c.device == series.device), default=0
    )
    kept = [v for i, v in values if i >= start]
    if len(kept) < MIN_RUNS or np.mean(kept) <= 0:
        return None
    cv, ci = cv_with_interval(kept)
    return NoiseScore(
        device=series.device,
        model=series.model,
        preset=series.preset,
        figure=p50.name,
        cv=cv,
        cv_ci=ci,
        runs=len(kept),
        min_effect=min_effect,
        too_noisy=cv * SPREAD_FACTOR > min_effect,
    )


def noisy_boards(rows, devices, models, settings) -> dict[str, str]:
    """Of ``devices``, those too noisy for a model of ``models`` (names in the lab's models
    file): name → the message. ``rows``: the history's runs (``History.runs``)."""
    from .changes import find_changes

    rows = [r for r in rows if r["device"] in devices]
    report = find_changes(rows, settings)
    out: dict[str, str] = {}
    from .fleet import NOISY_PREFIX

    for score in report.noise:
        if score.too_noisy and score.model in models:
            out.setdefault(
                score.device,
                f"{NOISY_PREFIX}{score.message()}; left out by --skip-noisy until it is quieter",
            )
    return out


def noise_for_report(
    history, device: str, model_sha256: str, preset: str | None, min_effect: float
) -> NoiseScore | None:
    """The noise score of the series a gated report belongs to (its board, its model by
    digest, its preset) from ``history``, judged against ``min_effect`` (the policy's
    baseline minimum effect); None without enough recorded runs."""
    from .changes import ChangeSettings, find_changes

    rows = [
        r
        for r in history.runs(device=device, model=model_sha256)
        if (r.get("preset") or None) == (preset or None)
    ]
    if not rows:
        return None
    settings = ChangeSettings()
    settings = settings.updated({"min_effect_latency": min_effect}, "the policy's baseline")
    scores = find_changes(rows, settings).noise
    return scores[0] if scores else None
