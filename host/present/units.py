"""The one unit rule for durations, shared by the terminal summary and the HTML pages.

A single figure (:func:`duration_text`) takes the unit that suits it: microseconds below
1 ms (one decimal), milliseconds below 100 ms (two decimals), else whole milliseconds. A
table or an axis takes one unit for all its figures (:func:`table_unit`): microseconds
when every median is under 1 ms, else milliseconds, and each figure three significant
digits at most (:func:`scaled_text`). Reports hold milliseconds; only their display
changes.
"""

from __future__ import annotations

from collections.abc import Iterable


def duration_text(value_ms: float | None) -> str:
    """One duration with its unit: ``141.1 µs``, ``12.50 ms``, ``106 ms``; ``—`` for None."""
    if value_ms is None:
        return "—"
    if value_ms < 1:
        return f"{value_ms * 1000:.1f} µs"
    return f"{value_ms:.2f} ms" if value_ms < 100 else f"{value_ms:.0f} ms"


def table_unit(medians_ms: Iterable[float | None]) -> tuple[str, float]:
    """``(unit, scale)`` for a table or axis of durations: µs when every median is under
    1 ms, else ms; a value in ms times ``scale`` is in ``unit``."""
    known = [m for m in medians_ms if m is not None]
    return ("µs", 1000.0) if known and max(known) < 1.0 else ("ms", 1.0)


def scaled_text(value_ms: float | None, scale: float) -> str:
    """A duration in a table's unit (``scale`` from :func:`table_unit`): 2 decimals under
    10, 1 under 100, none above; ``—`` for None."""
    if value_ms is None:
        return "—"
    x = value_ms * scale
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def figure_text(value, unit: str) -> str:
    """A figure of ``compare`` with its unit: durations (``ms``) by :func:`duration_text`,
    other floats to four significant digits; ``—`` for None."""
    if value is None:
        return "—"
    if unit == "ms" and isinstance(value, (int, float)):
        return duration_text(value)
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".rstrip()


def spread_text(runs: int | None, cv: float | None) -> str:
    """The spread of a figure over repeated runs, as history shows it beside the runs'
    median: ``(5 runs, CV 1.4%)``; empty for a report of one run."""
    if not runs:
        return ""
    return f"({runs} runs" + ("" if cv is None else f", CV {cv:.1%}") + ")"
