"""``edgequal.Report``: a verified report with typed attributes over its predicate.

Only a report that verified is ever a :class:`Report` (built by ``Device.qualify`` or
``edgequal.verify``); the envelope's bytes travel with it, unchanged, so it can be
written, gated or verified again. The figures are those docs/report-schema.md names;
where a latency shape was measured through interference and its clean calls decide,
the clean figures are the ones shown (as the gate judges them).

A figure the run did not measure (a p99 of 309 samples, which needs 368) is a
:class:`NotMeasured`, never None: it is false in a truth test, and comparing or
computing with it raises :class:`~edgequal.host.errors.NotMeasuredError` saying why,
so ``assert report.latency[0].p99_ms < 50`` fails with the reason, not a TypeError.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgequal.host.devices.verify import VerifiedReport
from edgequal.host.errors import NotMeasuredError

# The percentile each summary key holds, as the gate names it (its minimum sample count).
_PERCENTILE_LABELS = {
    "p90_ms": "p90",
    "p95_ms": "p95",
    "p99_ms": "p99",
    "p99_9_ms": "p99.9",
    "p50_ci_ms": "p50",
    "p99_ci_ms": "p99",
}

_SUMMARY_KEYS = (
    "count",
    "min_ms",
    "mean_ms",
    "sd_ms",
    "cv",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "p99_9_ms",
    "max_ms",
    "p50_ci_ms",
    "p99_ci_ms",
)


class NotMeasured:
    """The value of a figure the run did not measure, with why (``reason``).

    False in a truth test (``if lat.p99_ms:``; ``edgequal.NotMeasured`` for isinstance);
    printed as ``not measured (REASON)``. Comparing it, computing with it, converting it
    to a number or indexing it (a confidence interval) raises
    :class:`~edgequal.host.errors.NotMeasuredError` with the reason, e.g. "p99 not
    measured: 309 samples, 368 needed; the run was inconclusive: other processes took
    the CPU; re-run on a quiet board".
    """

    __slots__ = ("figure", "reason")

    def __init__(self, figure: str, reason: str):
        self.figure = figure
        self.reason = reason

    def _refuse(self, *_args):
        raise NotMeasuredError(self.reason, hint="check it first: if lat.p99_ms: …")

    __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __pow__ = __rpow__ = _refuse
    __neg__ = __abs__ = __float__ = __int__ = __round__ = __index__ = _refuse
    __getitem__ = __iter__ = __len__ = _refuse

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other) -> bool:
        return isinstance(other, NotMeasured) and other.figure == self.figure

    def __hash__(self) -> int:
        return hash(("NotMeasured", self.figure))

    def __format__(self, spec: str) -> str:
        return str(self)  # f"{lat.p99_ms:.2f}" prints the reason rather than failing

    def __str__(self) -> str:
        return f"not measured ({self.reason})"

    def __repr__(self) -> str:
        return f"NotMeasured({self.figure!r}, {self.reason!r})"


def _not_measured(key: str, count: int, run_note: str) -> NotMeasured:
    """What stands for summary figure ``key`` when the report has none."""
    from edgequal.host.judge.check_kit import percentile_not_measured

    label = _PERCENTILE_LABELS.get(key)
    figure = key.removesuffix("_ms")
    if label is not None:
        reason = percentile_not_measured(label, count)
        if key.endswith("_ci_ms"):
            reason = f"{label} 95 % interval not measured: " + reason.split(": ", 1)[1]
    else:
        reason = f"{figure} not measured in this report"
    return NotMeasured(figure, reason + run_note)


def _run_note(status: str | None, cause: str | None) -> str:
    """``; the run was inconclusive: WHY; re-run on a quiet board`` for a run that was not
    ``passed``; empty otherwise."""
    from edgequal.host.judge.check_kit import RERUN_ADVICE

    if status in (None, "passed", "degraded"):
        return ""
    why = (cause or "").removesuffix(RERUN_ADVICE).rstrip("; ")
    note = f"; the run was {status}" + (f": {why}" if why else "")
    return note + (f"; {RERUN_ADVICE}" if status == "inconclusive" else "")


@dataclass(frozen=True)
class Latency:
    """Warm latency of one input shape: the figures that decide (milliseconds).

    ``p99_ms`` is a :class:`NotMeasured` under 368 samples and ``p99_9_ms`` under 3,688
    (nearest rank), as is any figure the report lacks; ``decided_on`` is ``clean`` when
    only the calls that kept the CPU count.
    ``claims`` holds the 99 % percentile claims of those figures (``stats.percentile_claims``:
    ``claims["p99"]["value_ms"]``, or ``["needs"]`` samples where none can be made yet).
    """

    shape: str
    count: int
    min_ms: float
    mean_ms: float
    sd_ms: float
    cv: float
    p50_ms: float
    p90_ms: float | NotMeasured
    p95_ms: float | NotMeasured
    p99_ms: float | NotMeasured
    p99_9_ms: float | NotMeasured
    max_ms: float
    p50_ci_ms: tuple[float, float] | NotMeasured
    p99_ci_ms: tuple[float, float] | NotMeasured
    claims: dict | None
    decided_on: str
    steady: bool
    cause: str | None
    entry: dict = field(repr=False, compare=False)

    @classmethod
    def from_entry(
        cls, entry: dict, status: str | None = None, cause: str | None = None
    ) -> Latency:
        """One ``results.latency.per_shape`` entry of a verified predicate; ``status`` and
        ``cause`` (the report's) go into the reason of each figure it lacks."""
        from edgequal.contract.preemption import decided_on_clean, decisive_summary

        s = decisive_summary(entry)
        figures = {k: s.get(k) for k in _SUMMARY_KEYS}
        for k in ("p50_ci_ms", "p99_ci_ms"):
            figures[k] = tuple(figures[k]) if figures[k] else None
        note = _run_note(status, cause)
        for k, v in figures.items():
            if v is None:
                figures[k] = _not_measured(k, s.get("count") or 0, note)
        return cls(
            shape=entry["shape"],
            **figures,
            claims=s.get("claims"),
            decided_on="clean" if decided_on_clean(entry) else "all",
            steady=bool((entry.get("warmup") or {}).get("steady", True)),
            cause=entry.get("cause"),
            entry=entry,
        )

    def samples_ns(self):
        """The raw samples that decide (int64 nanoseconds, numpy), or None without them."""
        from edgequal.contract.preemption import decisive_samples_ns

        return decisive_samples_ns(self.entry)


class LatencyTable(Mapping):
    """Latency per input shape: ``report.latency["x=1x4"]`` or ``report.latency[0]``."""

    def __init__(self, entries: list[Latency]):
        self._entries = entries

    def __getitem__(self, key: str | int) -> Latency:
        if isinstance(key, int):
            return self._entries[key]
        for e in self._entries:
            if e.shape == key or e.shape.split("=", 1)[-1] == key:
                return e
        shapes = ", ".join(e.shape for e in self._entries) or "none"
        raise KeyError(f"no latency for shape {key!r} (measured: {shapes})")

    def __iter__(self) -> Iterator[str]:
        return (e.shape for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"LatencyTable({[e.shape for e in self._entries]})"


@dataclass(frozen=True)
class Report:
    """A verified device report: the device's own signed figures, typed.

    ``envelope`` is the DSSE envelope's bytes exactly as the device signed them; ``path``
    where they were written (None when not written). ``notes`` are things to know about
    the run (a golden set let through for another model); ``interrupted`` is set when the
    run was cancelled and this is its signed ``incomplete`` report.
    """

    verified: VerifiedReport = field(repr=False)
    envelope: bytes = field(repr=False)
    path: Path | None = None
    notes: tuple[str, ...] = ()
    interrupted: bool = False
    issued_here: bool = True
    """Whether this host issued the nonce the report answers (a report it qualified)."""

    @property
    def predicate(self) -> dict:
        """The signed predicate (docs/report-schema.md), as the device wrote it."""
        return self.verified.predicate

    @property
    def results(self) -> dict:
        """The predicate's ``results`` object."""
        return self.predicate.get("results") or {}

    @property
    def device(self) -> str:
        """The name of the pinned device whose key signed the report."""
        return self.verified.device_name

    @property
    def key_fingerprint(self) -> str:
        """The signing key's fingerprint (``SHA256:…``)."""
        return self.verified.fingerprint

    @property
    def run_id(self) -> str:
        """The device's run id."""
        return self.verified.run_id

    @property
    def status(self) -> str:
        """``passed``, ``degraded``, ``failed``, ``inconclusive`` or ``incomplete``."""
        return self.verified.status

    @property
    def cause(self) -> str | None:
        """Why the status is not ``passed``, in the device's words (None when passed)."""
        return self.predicate.get("reason")

    @property
    def subjects(self) -> list[dict]:
        """``{"name", "sha256", "role"}`` of the model (first), its data files and the golden set
        (``role``: docs/report-schema.md; None in reports of agents from before roles)."""
        return self.verified.subjects

    @property
    def model(self) -> dict:
        """The model's subject: ``{"name", "sha256"}``."""
        return self.subjects[0]

    @property
    def latency(self) -> LatencyTable:
        """Warm latency per input shape, by shape text or by index."""
        per_shape = (self.results.get("latency") or {}).get("per_shape") or []
        return LatencyTable([Latency.from_entry(e, self.status, self.cause) for e in per_shape])

    @property
    def cold_load(self) -> dict | None:
        """Cold load: ``runs`` and ``{median, min, max}`` of ``import_ms``, ``load_ms``,
        ``first_inference_ms``, ``total_ms``; None when not measured."""
        return self.results.get("cold_load")

    @property
    def drift(self) -> dict[str, dict]:
        """Drift per output (worst case over cases: ``max_abs``, ``psnr_db``, ``passed``…);
        empty without a golden set."""
        return dict((self.results.get("drift") or {}).get("outputs") or {})

    @property
    def flips(self) -> int | None:
        """Decision flips against the golden set's rule; None without a rule."""
        decisions = (self.results.get("drift") or {}).get("decisions")
        return None if not decisions else decisions.get("flip_count")

    @property
    def sustained(self) -> dict | None:
        """The sustained phase (``peak_per_s``, ``sustained_per_s``, ``stability``,
        ``verdict``…); None when the plan had none."""
        return self.results.get("sustained")

    def runs(self, figure: str = "p50_ms", shape: str | None = None) -> list[float]:
        """``figure`` in each run of this report, what a verdict weighs: every run of a
        ``--repeat N`` report (the first shape's ``p50_ms``, ``p99_ms``, ``sustained_per_s``),
        else its one value; ``cold_load_ms``, ``first_inference_ms`` are one per report
        (host/judge/run_figures.py, docs/gating.md)."""
        from edgequal.host.judge.run_figures import run_figures

        return list(run_figures(self.predicate, figure, shape).values)

    @property
    def findings(self) -> list[dict]:
        """Findings (``kind``, ``phase``, ``cause``, ``message``…), worst first."""
        return list(self.predicate.get("findings") or [])

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this report (0 passed or degraded; docs/gating.md)."""
        from edgequal.contract.exit_codes import exit_code_for

        if self.interrupted:
            return 130
        return exit_code_for(self.status, self.findings)

    def save(self, path: str | Path) -> Path:
        """Write the envelope's bytes, unchanged, to ``path``; returns it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.envelope)
        return path

    def to_json(self) -> dict[str, Any]:
        """The verified predicate (what ``qualify --json`` prints)."""
        return self.predicate

    def __repr__(self) -> str:
        return f"Report(run {self.run_id} on {self.device}: {self.status})"
