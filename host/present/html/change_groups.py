"""The lab's changes page (``history changes --html PAGE``): the groups of
``host/lab/change_groups.py``, the latest night first, each with its changes and a link to
each change's series on the trend page written beside it (``trend.py``'s anchors).

A group of several boards reads "12 of 12 raspberry-pi/5 boards, night 41: kernel 6.6.31 →
6.6.51"; a change of one board alone reads as that board's own (its health). Each change
says its cause (recorded, machine, unexplained) and whether it fails a fleet run. The
page is one file: no script, nothing fetched, every text from the database escaped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from .parts import CSS, escape, html_table
from .trend import series_anchor

CAUSE_BADGES = {
    "recorded": ("recorded", "#0969da"),
    "machine": ("machine", "#9a6700"),
    "unexplained": ("unexplained", "#cf222e"),
}

PAGE_CSS = """
.group { border: 1px solid #d0d7de; border-radius: 6px; padding: 0.4em 0.9em; margin: 1em 0; }
.group.alone { border-style: dashed; }
.group h2 { font-size: 1.05em; margin: 0.4em 0; overflow-wrap: anywhere; }
.cause { color: #fff; border-radius: 1em; padding: 0 0.6em; font-size: 0.85em; }
.group table { width: 100%; }
.group td, .group th { white-space: nowrap; vertical-align: top; }
.group .headline { white-space: normal; overflow-wrap: anywhere; }
"""


def _cause(cause: str) -> str:
    label, color = CAUSE_BADGES.get(cause, (cause, "#57606a"))
    return f'<span class="cause" style="background:{color}">{escape(label)}</span>'


def _ratio(c) -> str:
    if c.ratio is None:
        return escape(f"{c.median_before:g} → {c.median_after:g}")
    return escape(f"×{c.ratio:.3f} ({(c.ratio - 1) * 100:+.0f} %)")


def _group(g, trend_href: str, settings) -> str:
    rows = []
    for c in g.changes:
        href = f"{trend_href}#{series_anchor(c.device, c.model)}"
        verdict = "fails" if c.fails(settings) else ("shown, not failed" if c.worse else "better")
        rows.append(
            [
                f'<a href="{escape(href)}">{escape(c.model)} on {escape(c.device)}</a>',
                escape(c.figure),
                _ratio(c),
                f"{c.p_value:.3g}",
                _cause(c.cause),
                escape(verdict),
                f'<span class="headline">{escape(c.headline())}</span>',
            ]
        )
    table = html_table(
        ["series", "figure", "ratio", "p", "cause", "in a fleet run", "headline"],
        rows,
        [False, False, True, True, False, False, False],
    )
    kind = "alone" if g.alone else "fleet"
    return f'<section class="group {kind}"><h2>{escape(g.headline())}</h2>{table}</section>'


def render_changes_page(
    groups: Sequence, *, trend_href: str, settings, source: str = "", series: int = 0
) -> str:
    """The page of ``groups`` (``lab/change_groups.group_changes``: the latest night first),
    each change linking ``trend_href#<series anchor>``; ``settings``: the sensitivity they
    were found with (``lab/changes.ChangeSettings``)."""
    body = [_group(g, trend_href, settings) for g in groups]
    if not body:
        body.append(f'<p class="muted">No change beyond noise in {series} series.</p>')
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    machine = "fail" if settings.fail_on_machine else "are shown, not failed"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<title>edgequal changes</title><style>{CSS}{PAGE_CSS}</style></head><body>"
        "<h1>Changes beyond noise</h1>"
        f'<p class="muted">{escape(source)} · generated {escape(generated)} · '
        f"p ≤ {settings.p_value:g} · {series} series · the latest night first; machine "
        f'changes {machine} · <a href="{escape(trend_href)}">every series\' trend</a></p>'
        f"{''.join(body)}</body></html>"
    )


def write_changes_page(path: Path, groups: Sequence, **kwargs) -> Path:
    """Write :func:`render_changes_page` to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_changes_page(groups, **kwargs), encoding="utf-8")
    return path
