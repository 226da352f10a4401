"""Which night changed, beyond noise, and why: change points over a lab's history.

The series and their figures come from ``host/lab/series.py``. Each figure's series goes
to the detector of ``host/judge/change_points.py``; each change found carries the first run
after it (run id, date, fleet run), the medians either side with a bootstrap interval of
their ratio (``host/judge/regression.py``), the p-value, the boards where the same change
appears, the **culprit** (``host/lab/culprit.py``: every fingerprint field that differs
between the runs either side, ranked by how well it separates the runs before from those
after) and, where both sides profiled their operators, the per-operator diff
(``host/lab/operator_diff.py``). Each series' noise score is ``host/lab/noise.py``'s.

Each change has a **cause** (``host/lab/change_causes.py``): ``recorded`` (a culprit field),
``machine`` (nothing recorded changed; other processes' CPU use, the clean-call fraction or
the bare speed moved with it) or ``unexplained``; a machine change is shown, not failed,
unless the lab says so (``fail_on_machine``).

Sensitivity (:class:`ChangeSettings`, resolved once by :func:`change_settings` for
``history changes``, ``history trend`` and ``fleet run``) comes from the defaults below,
then the lab file's ``[changes]`` table, then a policy's ``[changes]`` section (minimum
effects and ``fail_on_machine``; never the p-value, which is the lab's), then
``--p-value`` (docs/history.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import UsageError
from ..judge.change_points import (
    DEFAULT_MIN_POINTS,
    DEFAULT_P_VALUE,
    DEFAULT_PERMUTATIONS,
    change_points,
)
from .change_causes import (
    DIRECTED_KINDS,
    cause_of,
    fails,
    machine_evidence,
    machine_readings,
    machine_text,
)
from .culprit import culprit, culprit_text, load_either_side
from .noise import series_noise
from .operator_diff import operator_diff, operators_text
from .series import GAP_STATUSES, Figure, Series, build_series, figures_of

DEFAULT_MIN_EFFECT: Mapping[str, float] = {
    "latency": 0.05,
    "tail": 0.10,
    "throughput": 0.05,
    "stability": 0.05,
    "cold": 0.20,
    "drift": 1.0,
    "memory": 0.05,
    "energy": 0.05,
    "accuracy": 0.01,
}
"""Smallest change that matters, as a fraction of the median before, per kind of figure.

Latency p50, throughput, memory and energy: 5 %; p99: 10 % (a tail moves more night to
night); cold load and first inference: 20 % (one process start, page cache and disk);
drift: 100 % (a max absolute error doubling: smaller moves are rounding noise);
accuracy (top-1 on labelled cases, docs/accuracy.md): 1 %, about a point at 90 %."""

SAME_CHANGE_WINDOW = dt.timedelta(hours=36)
"""Two boards' changes are the same change when their first runs after it belong to one
fleet run or were measured within this of each other: noise can place one board's change
a night later than another's (its first slow night looked like the nights before)."""


@dataclass(frozen=True)
class ChangeSettings:
    """How sensitive change detection is: p-value, points either side, permutations, seed,
    and the minimum effect per kind of figure (:data:`DEFAULT_MIN_EFFECT`)."""

    p_value: float = DEFAULT_P_VALUE
    min_points: int = DEFAULT_MIN_POINTS
    permutations: int = DEFAULT_PERMUTATIONS
    seed: int = 0
    min_effect: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIN_EFFECT))
    fail_on_machine: bool = False
    """A new change for the worse that only the machine explains (cause ``machine``) fails
    the fleet run too (default: shown and recorded, not failed)."""

    KEYS = ("p_value", "min_points", "permutations", "seed", "min_effect", "fail_on_machine") + (
        tuple(f"min_effect_{k}" for k in DEFAULT_MIN_EFFECT)
    )

    def updated(
        self, table: Mapping[str, Any] | None, where: str, p_value: bool = True
    ) -> ChangeSettings:
        """These settings with a ``[changes]`` table's keys applied (``min_effect`` sets every
        kind, ``min_effect_<kind>`` one); UsageError naming ``where`` on a bad key or value.
        ``p_value=False``: the table may not set the p-value (a policy's: it is the lab's)."""
        if not table:
            return self
        if not isinstance(table, Mapping):
            raise UsageError(f"{where}: [changes] must be a table")
        out = replace(self, min_effect=dict(self.min_effect))
        effects = dict(out.min_effect)
        for key, value in table.items():
            if key not in self.KEYS:
                raise UsageError(
                    f"{where}: unknown key changes.{key}", hint="one of " + ", ".join(self.KEYS)
                )
            if key == "p_value" and not p_value:
                raise UsageError(
                    f"{where}: changes.p_value is the lab's setting, not a policy's",
                    hint="set [changes] p_value in lab.toml or pass --p-value: history changes, "
                    "history trend and fleet run then use the same",
                )
            if key == "fail_on_machine":
                if not isinstance(value, bool):
                    raise UsageError(f"{where}: changes.fail_on_machine must be true or false")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"{where}: changes.{key} must be a number")
            if key == "p_value" and not 0.0 < value < 1.0:
                raise UsageError(f"{where}: changes.p_value must be between 0 and 1")
            if key in ("min_points", "permutations", "seed") and (
                int(value) != value or value < (0 if key == "seed" else 1)
            ):
                raise UsageError(f"{where}: changes.{key} must be a whole number of at least 1")
            if key.startswith("min_effect") and not 0.0 <= value < 100:
                raise UsageError(f"{where}: changes.{key} must be a fraction (0.05 = 5 %)")
        if "min_effect" in table:
            effects = {k: float(table["min_effect"]) for k in effects}
        for kind in DEFAULT_MIN_EFFECT:
            if f"min_effect_{kind}" in table:
                effects[kind] = float(table[f"min_effect_{kind}"])
        return replace(
            out,
            p_value=float(table.get("p_value", out.p_value)),
            min_points=int(table.get("min_points", out.min_points)),
            permutations=int(table.get("permutations", out.permutations)),
            seed=int(table.get("seed", out.seed)),
            min_effect=effects,
            fail_on_machine=bool(table.get("fail_on_machine", out.fail_on_machine)),
        )

    def with_p_value(self, p_value: float | None, where: str = "--p-value") -> ChangeSettings:
        """These settings with the command's ``--p-value`` (None: unchanged)."""
        if p_value is None:
            return self
        if not 0.0 < p_value < 1.0:
            raise UsageError(f"{where} must be between 0 and 1, got {p_value:g}")
        return replace(self, p_value=float(p_value))

    def to_json(self) -> dict:
        """JSON-ready fields."""
        return {**asdict(self), "min_effect": dict(self.min_effect)}


def change_settings(lab=None, policy=None, policy_path=None, p_value=None) -> ChangeSettings:
    """The one sensitivity of ``history changes``, ``history trend`` and ``fleet run``: the
    defaults, the lab's ``[changes]`` (``lab``: ``inventory.Lab``), a policy's ``[changes]``
    (``policy``: ``judge.policy.Policy`` read from ``policy_path``; its minimum effects and
    ``fail_on_machine``, never the p-value), then ``--p-value``."""
    settings = ChangeSettings()
    if lab is not None:
        settings = settings.updated(lab.changes, str(lab.path))
    if policy is not None:
        settings = settings.updated(policy.changes, str(policy_path or "policy"), p_value=False)
    return settings.with_p_value(p_value)


# -- changes ----------------------------------------------------------------------------


@dataclass
class Change:
    """One change point of one figure in one series, with its evidence and culprit."""

    device: str
    model: str
    preset: str | None
    figure: str
    unit: str
    kind: str
    better: str
    index: int
    first_after: dict
    last_before: dict
    median_before: float
    median_after: float
    ratio: float | None
    ratio_ci: tuple[float, float] | None
    p_value: float
    n_before: int
    n_after: int
    min_effect: float
    reports_before: list[str] = field(default_factory=list)
    reports_after: list[str] = field(default_factory=list)
    boards: list[str] = field(default_factory=list)
    culprit: list[dict] = field(default_factory=list)
    operators: list[dict] = field(default_factory=list)
    load: dict | None = None
    """Other processes' CPU use in the timed loops either side (``culprit.load_either_side``)."""
    machine: list[dict] = field(default_factory=list)
    """The machine's measurements either side (``change_causes.machine_evidence``): what a
    change with no recorded culprit is read against."""
    too_noisy: str | None = None
    """Why the board is too noisy for this minimum effect (``noise.series_noise``), or None: a
    change found there may be its noise moving (a neighbour's load, a clock), so read it so."""

    @property
    def worse(self) -> bool:
        """The figure moved the bad way (slower, less throughput, more drift or memory)."""
        return _worse(self.median_before, self.median_after, self.better)

    @property
    def cause(self) -> str:
        """``recorded``, ``machine`` or ``unexplained`` (``change_causes.cause_of``)."""
        return cause_of(self.culprit, self.machine)

    def fails(self, settings: ChangeSettings) -> bool:
        """Whether this change, new in a fleet run, fails it (``change_causes.fails``)."""
        return fails(self.worse, self.cause, settings.fail_on_machine)

    def headline(self) -> str:
        """One line: 'p50 x +31 % from 2026-11-14 on pi5-a and pi5-b; changed there: ...'."""
        if self.ratio is not None:
            size = f"{(self.ratio - 1.0) * 100:+.0f} %"
        else:
            size = f"{self.median_before:g} → {self.median_after:g}"
        boards = " and ".join(self.boards) if self.boards else self.device
        text = (
            f"{self.figure} {size} from {(self.first_after['measured_at'] or '')[:10]} "
            f"on {boards} ({self.model}, {self.preset or 'no preset'})"
        )
        if self.culprit:
            text += "; changed there: " + culprit_text(self.culprit)
        else:
            text += "; nothing recorded changed there" + machine_text(self.machine)
        ops = operators_text(self.operators)
        if ops:
            text += "; " + ops
        if self.too_noisy:
            text += f" (on a noisy board: {self.too_noisy})"
        return text

    def to_json(self) -> dict:
        """JSON-ready fields, with the headline."""
        out = asdict(self)
        out["ratio_ci"] = list(self.ratio_ci) if self.ratio_ci else None
        out["worse"] = self.worse
        out["cause"] = self.cause
        out["headline"] = self.headline()
        return out


def _ratio_ci(before: np.ndarray, after: np.ndarray, seed: int) -> tuple[float, float] | None:
    """The bootstrap interval of median(after) / median(before) (regression.py's)."""
    from ..judge.regression import bootstrap_median_ratio

    if float(np.median(before)) <= 0:
        return None
    r = bootstrap_median_ratio(before, after, iterations=2000, seed=seed)
    return (r.ci_low, r.ci_high)


def series_changes(s: Series, settings: ChangeSettings) -> list[Change]:
    """The changes of every figure of one series."""
    per_point = [figures_of(p.report.predicate) for p in s.points]
    figures: list[Figure] = []
    for f in per_point:
        for fig in f:
            if fig not in figures:
                figures.append(fig)
    s.figures = len(figures)
    out = []
    for fig in figures:
        idx = [i for i, f in enumerate(per_point) if fig in f]
        values = np.array([per_point[i][fig] for i in idx])
        min_effect = settings.min_effect.get(fig.kind, DEFAULT_MIN_EFFECT[fig.kind])
        splits = change_points(
            values,
            p_value=settings.p_value,
            min_effect=min_effect,
            min_points=settings.min_points,
            permutations=settings.permutations,
            seed=settings.seed,
        )
        bounds = [0] + [sp.index for sp in splits] + [len(idx)]
        for k, sp in enumerate(splits):
            before = [s.points[i] for i in idx[bounds[k] : sp.index]]
            after = [s.points[i] for i in idx[sp.index : bounds[k + 2]]]
            out.append(
                Change(
                    device=s.device,
                    model=s.model,
                    preset=s.preset,
                    figure=fig.name,
                    unit=fig.unit,
                    kind=fig.kind,
                    better=fig.better,
                    index=idx[sp.index],
                    first_after=after[0].to_json(),
                    last_before=before[-1].to_json(),
                    median_before=sp.median_before,
                    median_after=sp.median_after,
                    ratio=sp.ratio,
                    ratio_ci=_ratio_ci(
                        values[bounds[k] : sp.index],
                        values[sp.index : bounds[k + 2]],
                        settings.seed,
                    ),
                    p_value=sp.p_value,
                    n_before=sp.n_before,
                    n_after=sp.n_after,
                    min_effect=min_effect,
                    reports_before=[p.envelope_sha256 for p in before],
                    reports_after=[p.envelope_sha256 for p in after],
                    culprit=culprit(before, after, settings.min_points),
                    operators=operator_diff(before, after),
                    load=load_either_side(before, after),
                    machine=machine_evidence(
                        [machine_readings(p.report.predicate) for p in before],
                        [machine_readings(p.report.predicate) for p in after],
                        worse=_worse(sp.median_before, sp.median_after, fig.better),
                        directed=fig.kind in DIRECTED_KINDS,
                    ),
                )
            )
    return out


def _worse(before: float, after: float, better: str) -> bool:
    if after == before:
        return False
    return (after > before) if better == "lower" else (after < before)


def _same_change(a: Change, b: Change) -> bool:
    if (a.model, a.preset, a.figure) != (b.model, b.preset, b.figure) or a.worse != b.worse:
        return False
    if a.first_after.get("fleet_run") and a.first_after["fleet_run"] == b.first_after.get(
        "fleet_run"
    ):
        return True
    ta = dt.datetime.strptime(a.first_after["measured_at"], "%Y-%m-%dT%H:%M:%SZ")
    tb = dt.datetime.strptime(b.first_after["measured_at"], "%Y-%m-%dT%H:%M:%SZ")
    return abs(ta - tb) <= SAME_CHANGE_WINDOW


@dataclass
class ChangeReport:
    """Every series analysed, its changes, and the settings they were found with."""

    series: list[Series]
    changes: list[Change]
    settings: ChangeSettings
    noise: list = field(default_factory=list)
    """Each series' noise score (``noise.series_noise``), where it has enough runs."""

    def too_noisy(self) -> dict[str, str]:
        """Boards too noisy for the latency minimum effect: name → why (first series)."""
        out: dict[str, str] = {}
        for n in self.noise:
            if n.too_noisy:
                out.setdefault(n.device, n.message())
        return out

    @property
    def gap_count(self) -> int:
        """Runs left out of every series (failed, inconclusive or incomplete)."""
        return sum(len(s.gaps) for s in self.series)

    def gaps_by_status(self) -> dict[str, int]:
        """How many runs of each status were left out of the series, in :data:`GAP_STATUSES`
        order (a status with none is absent)."""
        counts = {status: 0 for status in GAP_STATUSES}
        for s in self.series:
            for g in s.gaps:
                counts[g["status"]] = counts.get(g["status"], 0) + 1
        return {k: v for k, v in counts.items() if v}

    def to_json(self) -> dict:
        """The analysis as JSON."""
        return {
            "settings": self.settings.to_json(),
            "series": [s.to_json() for s in self.series],
            "gaps": self.gap_count,
            "gaps_by_status": self.gaps_by_status(),
            "changes": [c.to_json() for c in self.changes],
            "noise": [n.to_json() for n in self.noise],
        }


def find_changes(
    rows: Iterable[Mapping],
    settings: ChangeSettings | None = None,
    noise_min_effect: float | None = None,
) -> ChangeReport:
    """Change points on every series of ``rows`` (``History.runs``), the boards sharing each.
    Each series' noise score is judged against ``noise_min_effect`` (default: the
    settings' latency minimum effect)."""
    settings = settings or ChangeSettings()
    judged_against = (
        settings.min_effect["latency"] if noise_min_effect is None else noise_min_effect
    )
    series = build_series(rows)
    changes = [c for s in series for c in series_changes(s, settings)]
    for c in changes:
        c.boards = sorted({o.device for o in changes if _same_change(c, o)})
    changes.sort(key=lambda c: (c.first_after["measured_at"] or "", c.model, c.figure, c.device))
    noise = []
    for s in series:
        own = [c for c in changes if (c.device, c.model, c.preset) == s.key[:2] + (s.preset,)]
        score = series_noise(s, own, judged_against)
        if score is not None:
            noise.append(score)
            if score.too_noisy:
                for c in own:
                    c.too_noisy = score.message()
    return ChangeReport(series, changes, settings, noise)
