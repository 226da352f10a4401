"""Change points kept up to date night by night: the detector's state per series, in the
history database, so judging one new night costs the last segment, not the whole history.

A lab of 50 boards × 40 models run nightly records 730,000 runs a year; recomputing every
series' change points each night grows with the history (E-Divisive's search is quadratic
in a segment's length). Apache Otava made its E-Divisive incremental the same way: a new
point can only add a change after the last one found, so only the **last segment** (the
points since the last change) is searched again, and earlier changes stand.

The state (table ``edgequal_change_state``) is one row per series × figure: how many points
it has seen, the changes found (index, p-value, medians either side) and the last segment's
values (at most ``window`` of the newest: a change is judged on the nights nearest it). The
figures are those the history keeps as columns of every run (``FIGURES``: the first input
shape's clean p50 and p99, sustained throughput, cold load, peak memory), so the state
needs no report decoded and survives the raw samples being dropped (``retention.py``).
``edgequal_change_mark`` holds the last report row the state has taken in.

:func:`update` takes in the runs recorded since (failed, inconclusive and incomplete runs
are gaps, a replaced fleet attempt is not a point); :func:`rebuild` is the full recompute
(every series from its first run, the whole of each series searched at once). The two agree
where every change stands out of its segment's noise (tests/host/lab/test_change_state.py);
``history changes`` (``changes.py``) stays the full analysis with culprits and causes.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    delete,
    select,
    tuple_,
)

from ..judge.change_points import change_points
from .changes import DEFAULT_MIN_EFFECT, ChangeSettings
from .history import History, metadata, reports
from .series import GAP_STATUSES

FIGURES: Mapping[str, str] = {
    "p50_ms": "latency",
    "p99_ms": "tail",
    "sustained_per_s": "throughput",
    "cold_total_ms": "cold",
    "peak_rss_mb": "memory",
}
"""History columns the state follows, each with its kind of figure (its minimum effect)."""

DEFAULT_SETTLE = 20
"""Points after a change before it is settled (kept for good, the last segment cut there);
until then it is provisional, searched for again each night."""

DEFAULT_WINDOW = 60
"""Newest points of the last segment the detector searches: two months of nights
(E-Divisive's search is quadratic in it, and a step is judged against the nights nearest it)."""

DEFAULT_STRIDE = 3
"""A series whose last segment fills the window and holds no provisional change is searched
every this many nights (on nights staggered over the series by their key), not every night:
the nightly cost of a lab's 1,000 series is mostly the permutation tests that find nothing,
and a change is then reported up to ``stride - 1`` nights later, at the same night
(BENCHMARKS.md "History at lab scale"). 1 searches every series every night."""

NIGHTLY_CONFIDENCE = 0.99
"""A change the nightly search calls must be beyond the minimum effect by its interval too
(``change_points``' ``confidence``: the one-sided 99 % bound of its level ratio), not by its
medians alone: searched night after night, a split of noise just past the minimum effect
is found sooner or later in a lab's quiet series (BENCHMARKS.md "History at lab scale")."""

NIGHTLY_STRICTER = 10
"""The nightly search's p-value is the lab's divided by this. Every night tests the last
segment again: at the analysis' p-value (0.01) a year of nightly tests called a change in
about a third of the unchanged series of scripts/bench/history_scale.py (CV 5 %, 300
nights); at p 0.001 none of 50 (BENCHMARKS.md "History at lab scale")."""


def nightly(settings: ChangeSettings) -> ChangeSettings:
    """The settings of the nightly search: p-value :data:`NIGHTLY_STRICTER` times smaller,
    with the shuffles to reach it (199 at 0.01 become 999 at 0.001)."""
    p = settings.p_value / NIGHTLY_STRICTER
    return replace(settings, p_value=p, permutations=max(settings.permutations, round(1 / p) - 1))


change_state = Table(
    "edgequal_change_state",
    metadata,
    Column("device", String(64), nullable=False),
    Column("model", String(255), nullable=False),
    Column("preset", String(16), nullable=False),
    Column("figure", String(32), nullable=False),
    Column("points", Integer, nullable=False),
    Column("tail_start", Integer, nullable=False),
    Column("tail", Text, nullable=False),
    Column("changes", Text, nullable=False),
    Column("provisional", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("device", "model", "preset", "figure", name="edgequal_change_state_pk"),
)

change_mark = Table(
    "edgequal_change_mark",
    metadata,
    Column("last_report_id", Integer, nullable=False),
)


@dataclass
class FigureState:
    """One series × figure: points seen, changes found, the last segment's newest values."""

    key: tuple[str, str, str, str]
    points: int = 0
    tail_start: int = 0
    tail: list[float] = field(default_factory=list)
    changes: list[dict] = field(default_factory=list)
    provisional: list[dict] = field(default_factory=list)

    def advance(
        self,
        values: Iterable[float],
        settings: ChangeSettings,
        window: int = DEFAULT_WINDOW,
        settle: int = DEFAULT_SETTLE,
        stride: int = DEFAULT_STRIDE,
    ) -> list[dict]:
        """Append ``values`` (newest last) and search the last segment again; the changes
        new to the state (index in the series, p-value, medians either side).

        A change found with fewer than ``settle`` points after it is **provisional**: it is
        searched for again each night (its evidence grows) and withdrawn if it fades. With
        ``settle`` points after it, it is **settled**: kept, and the last segment starts
        there. The search sees the last ``window`` points before ``values`` and all of them
        (a catch-up over many nights keeps the nights before them as context). A full
        window with nothing provisional is searched on its ``stride``-th nights only
        (:data:`DEFAULT_STRIDE`)."""
        values = [float(v) for v in values]
        if not values:
            return []
        full = len(self.tail) >= window
        self.tail.extend(values)
        self.points += len(values)
        if self.provisional and self.points - self.provisional[0]["index"] < settle:
            # A change found and not yet settled: searched again the night it can settle
            # (its evidence then complete), not every night before (a real step re-tested
            # nightly is most of the cost of a lab's night).
            self._trim(window)
            return []
        if full and not self.provisional and not self._due(len(values), stride):
            self._trim(window)
            return []
        found = self._search(settings)
        settled = [c for c in found if self.points - c["index"] >= settle]
        if settled:
            cut = settled[-1]["index"] - self.tail_start
            self.tail = self.tail[cut:]
            self.tail_start += cut
            self.changes.extend(settled)
        known = {c["index"] for c in self.changes} | {c["index"] for c in self.provisional}
        new = [c for c in found if c["index"] not in known]
        self.provisional = [c for c in found if self.points - c["index"] < settle]
        self._trim(window)
        return new

    def _due(self, new: int, stride: int) -> bool:
        """Whether the last ``new`` points reached one of this series' search nights: every
        ``stride``-th point count, offset by its key so that the series take turns."""
        if stride <= 1:
            return True
        offset = zlib.crc32("\x1f".join(self.key).encode()) % stride
        return (self.points + offset) // stride > (self.points - new + offset) // stride

    def _trim(self, window: int) -> None:
        """Keep the last ``window`` points of the last segment (and any provisional change's
        evidence: the points from ``settle`` before it stay until it settles)."""
        keep = window
        if self.provisional:
            keep = max(
                keep, self.tail_start + len(self.tail) - self.provisional[0]["index"] + window // 2
            )
        if len(self.tail) > keep:
            self.tail_start += len(self.tail) - keep
            self.tail = self.tail[-keep:]

    def all_changes(self) -> list[dict]:
        """Settled and provisional changes, in series order."""
        return sorted(self.changes + self.provisional, key=lambda c: c["index"])

    def _search(self, settings: ChangeSettings) -> list[dict]:
        if len(self.tail) < 2 * settings.min_points:
            return []
        kind = FIGURES[self.key[3]]
        splits = change_points(
            self.tail,
            p_value=settings.p_value,
            min_effect=settings.min_effect.get(kind, DEFAULT_MIN_EFFECT[kind]),
            min_points=settings.min_points,
            permutations=settings.permutations,
            seed=settings.seed,
            confidence=NIGHTLY_CONFIDENCE,
        )
        return [
            {
                "index": self.tail_start + s.index,
                "p_value": s.p_value,
                "median_before": s.median_before,
                "median_after": s.median_after,
            }
            for s in splits
        ]

    @classmethod
    def full(
        cls,
        key: tuple[str, str, str, str],
        values: list[float],
        settings: ChangeSettings,
        window: int = DEFAULT_WINDOW,
        settle: int = DEFAULT_SETTLE,
    ) -> FigureState:
        """The state of a whole series searched at once (the full recompute)."""
        kind = FIGURES[key[3]]
        splits = change_points(
            values,
            p_value=settings.p_value,
            min_effect=settings.min_effect.get(kind, DEFAULT_MIN_EFFECT[kind]),
            min_points=settings.min_points,
            permutations=settings.permutations,
            seed=settings.seed,
            confidence=NIGHTLY_CONFIDENCE,
        )
        found = [
            {
                "index": sp.index,
                "p_value": sp.p_value,
                "median_before": sp.median_before,
                "median_after": sp.median_after,
            }
            for sp in splits
        ]
        settled = [c for c in found if len(values) - c["index"] >= settle]
        last = settled[-1]["index"] if settled else 0
        start = max(last, len(values) - window)
        return cls(
            key,
            points=len(values),
            tail_start=start,
            tail=[float(v) for v in values[start:]],
            changes=settled,
            provisional=[c for c in found if len(values) - c["index"] < settle],
        )


@dataclass
class StateUpdate:
    """What one :func:`update` or :func:`rebuild` did: series × figures, points taken in,
    and the changes new to the state (``{"device", "model", "preset", "figure", ...}``)."""

    series: int
    points: int
    changes: list[dict]

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return {"series": self.series, "points": self.points, "changes": self.changes}


def _ensure_tables(history: History) -> None:
    metadata.create_all(history.engine, tables=[change_state, change_mark], checkfirst=True)


def _points_since(conn, last_id: int) -> tuple[dict[tuple, list[float]], int]:
    """Per series × figure key, the values of the runs recorded after row ``last_id`` (in
    measurement order; gaps and replaced attempts left out), and the last row id seen."""
    cols = [reports.c[name] for name in FIGURES]
    query = (
        select(
            reports.c.id,
            reports.c.device,
            reports.c.model_label,
            reports.c.model_name,
            reports.c.preset,
            reports.c.status,
            reports.c.replaced_by,
            *cols,
        )
        .where(reports.c.id > last_id)
        .order_by(reports.c.measured_at, reports.c.id)
    )
    out: dict[tuple, list[float]] = {}
    top = last_id
    for row in conn.execute(query).mappings():
        top = max(top, row["id"])
        if row["status"] in GAP_STATUSES or row["replaced_by"]:
            continue
        series = (row["device"], row["model_label"] or row["model_name"], row["preset"] or "")
        for name in FIGURES:
            if row[name] is not None:
                out.setdefault((*series, name), []).append(float(row[name]))
    return out, top


def _pack(values: list[float]) -> str:
    """A tail as text: base64 of its little-endian float64 values (exact, and a tenth of
    JSON's time to write and read: 1,000 series' tails a night)."""
    return base64.b64encode(np.asarray(values, dtype="<f8").tobytes()).decode("ascii")


def _unpack(text: str) -> list[float]:
    """:func:`_pack`'s values back; a JSON list (as earlier versions wrote) is read too."""
    if text.startswith("["):
        return [float(v) for v in json.loads(text)]
    return np.frombuffer(base64.b64decode(text), dtype="<f8").tolist()


def _load(conn) -> dict[tuple, FigureState]:
    return {
        (r.device, r.model, r.preset, r.figure): FigureState(
            (r.device, r.model, r.preset, r.figure),
            points=r.points,
            tail_start=r.tail_start,
            tail=_unpack(r.tail),
            changes=json.loads(r.changes),
            provisional=json.loads(r.provisional),
        )
        for r in conn.execute(select(change_state))
    }


def _rows(states: Iterable[FigureState], now: dt.datetime) -> list[dict]:
    return [
        {
            "device": s.key[0],
            "model": s.key[1],
            "preset": s.key[2],
            "figure": s.key[3],
            "points": s.points,
            "tail_start": s.tail_start,
            "tail": _pack(s.tail),
            "changes": json.dumps(s.changes),
            "provisional": json.dumps(s.provisional),
            "updated_at": now,
        }
        for s in states
    ]


def _save(conn, states: list[FigureState], top: int) -> None:
    """Replace the rows of ``states`` and move the mark to ``top`` (one transaction)."""
    now = dt.datetime.now(dt.timezone.utc)
    columns = tuple_(
        change_state.c.device, change_state.c.model, change_state.c.preset, change_state.c.figure
    )
    for i in range(0, len(states), 500):  # under SQLite's limit on bound parameters
        conn.execute(delete(change_state).where(columns.in_([s.key for s in states[i : i + 500]])))
    if states:
        conn.execute(change_state.insert(), _rows(states, now))
    conn.execute(delete(change_mark))
    conn.execute(change_mark.insert(), {"last_report_id": top})


def _named(key: tuple, change: dict) -> dict:
    return {"device": key[0], "model": key[1], "preset": key[2] or None, "figure": key[3], **change}


def update(
    history: History,
    settings: ChangeSettings | None = None,
    window: int = DEFAULT_WINDOW,
    stride: int = DEFAULT_STRIDE,
) -> StateUpdate:
    """Take in the runs recorded since the last update: each series × figure that has new
    points searches its last segment again. The state starts empty (a first update is a
    full pass, one night at a time being the same as all at once for the last segment)."""
    settings = nightly(settings or ChangeSettings())
    _ensure_tables(history)
    with history.engine.begin() as conn:
        last = conn.execute(select(change_mark.c.last_report_id)).scalar() or 0
        new, top = _points_since(conn, last)
        states = _load(conn) if new else {}
        touched, found = [], []
        for key, values in new.items():
            state = states.get(key) or FigureState(key)
            found += [
                _named(key, c) for c in state.advance(values, settings, window, stride=stride)
            ]
            touched.append(state)
        _save(conn, touched, top)
    return StateUpdate(len(touched), sum(len(v) for v in new.values()), found)


def rebuild(
    history: History, settings: ChangeSettings | None = None, window: int = DEFAULT_WINDOW
) -> StateUpdate:
    """The full recompute: every series × figure from its first run, searched whole, the
    state replaced by the result."""
    settings = nightly(settings or ChangeSettings())
    _ensure_tables(history)
    with history.engine.begin() as conn:
        values, top = _points_since(conn, 0)
        states = [FigureState.full(k, v, settings, window) for k, v in values.items()]
        conn.execute(delete(change_state))
        _save(conn, states, top)
    found = [_named(s.key, c) for s in states for c in s.all_changes()]
    return StateUpdate(len(states), sum(len(v) for v in values.values()), found)


def state_changes(history: History) -> dict[tuple, list[dict]]:
    """The changes the state holds, settled and provisional, per (device, model, preset,
    figure)."""
    _ensure_tables(history)
    with history.engine.connect() as conn:
        return {k: s.all_changes() for k, s in _load(conn).items()}
