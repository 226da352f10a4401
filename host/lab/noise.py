"""How noisy a board is for a model: the run-to-run spread of its clean p50, from history
(each series' score is ``changes.series_noise``).

A board's **noise score** for one model (one series of ``host/lab/changes.py``) is the
coefficient of variation of the clean p50 of its first input shape, pooled within the
stretches the series' change points of that figure cut it into (a real change is not
noise; every stretch's runs count), with a 95 % percentile-bootstrap interval (seeded). A board is **too noisy** for a
minimum effect when ``CV × 3 > min_effect``: three standard deviations of night-to-night
spread would pass for a change of that size, so a change of that size cannot be told from
noise there ("pi5-c is too noisy for a 10 % limit: CV 6.1 %").

``history changes`` lists every series' score; ``fleet run --skip-noisy`` leaves a board
out of the run when it is too noisy for any model the run would measure on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..judge.verdict import Spread
    from .changes import NoiseScore

NOISY_PREFIX = "too noisy: "
"""How an ``unhealthy`` reason from ``fleet run --skip-noisy`` begins."""


def noisy_boards(rows, devices, models, settings) -> dict[str, str]:
    """Of ``devices``, those too noisy for a model of ``models`` (names in the lab's models
    file): name → the message. ``rows``: the history's runs (``History.runs``)."""
    from .changes import find_changes

    rows = [r for r in rows if r["device"] in devices]
    report = find_changes(rows, settings)
    out: dict[str, str] = {}

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
    # The stretches come from the default sensitivity (real changes); the spread within them
    # is judged against the policy's limit. A 0.1 % limit finding its own "changes" would cut
    # the series at every wobble and leave too few runs in each stretch to score.
    scores = find_changes(rows, ChangeSettings(), noise_min_effect=min_effect).noise
    return scores[0] if scores else None


def noise_spread(score: NoiseScore | None) -> Spread | None:
    """The run-to-run spread a verdict assumes from a noise score (source ``history``): its
    CV, with the degrees of freedom of its runs less one per stretch; None without one."""
    from ..judge.verdict import HISTORY, Spread

    if score is None:
        return None
    return Spread.from_cv(score.cv, max(score.runs - score.segments, 1), HISTORY)


def history_spread(url: str, report, min_effect: float) -> tuple[NoiseScore | None, Spread | None]:
    """``--history URL``: the noise score of a verified report's board × model × preset, and
    the spread it gives a verdict; (None, None) without enough recorded runs."""
    from .history import History

    if not report.verified or not report.subjects:
        return None, None
    history = History.open(url)
    try:
        score = noise_for_report(
            history,
            report.device_name,
            report.subjects[0]["sha256"],
            (report.predicate.get("plan") or {}).get("preset"),
            min_effect,
        )
    finally:
        history.close()
    return score, noise_spread(score)
