"""A board's noise scores read from its history: the boards too noisy for a fleet run
(``fleet run --skip-noisy``), and the score and run-to-run spread of the series a gated or
re-run report belongs to (``--history URL``). The score itself is ``noise.py``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .noise import NOISY_PREFIX, NoiseScore

if TYPE_CHECKING:
    from ..judge.verdict import Spread


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
    CV, with the degrees of freedom of its runs less one per stretch, and its runs'
    session-to-session tail; None without one."""
    from ..judge.verdict import HISTORY, Spread

    if score is None:
        return None
    return Spread.from_cv(
        score.cv, max(score.runs - score.segments, 1), HISTORY, tail=score.session_tail
    )


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
