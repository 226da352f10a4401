"""``edgequal.Report``: a verified report with typed attributes over its predicate.

Only a report that verified is ever a :class:`Report` (built by ``Device.qualify`` or
``edgequal.verify``); the envelope's bytes travel with it, unchanged, so it can be
written, gated or verified again. The figures are those docs/report-schema.md names;
where a latency shape was measured through interference and its clean calls decide,
the clean figures are the ones shown (as the gate judges them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgequal.host.devices.verify import VerifiedReport

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


@dataclass(frozen=True)
class Latency:
    """Warm latency of one input shape: the figures that decide (milliseconds).

    ``p99_ms`` is None under 368 samples and ``p99_9_ms`` under 3,688 (nearest rank);
    ``decided_on`` is ``clean`` when only the calls that kept the CPU count.
    """

    shape: str
    count: int
    min_ms: float
    mean_ms: float
    sd_ms: float
    cv: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float | None
    p99_9_ms: float | None
    max_ms: float
    p50_ci_ms: tuple[float, float] | None
    p99_ci_ms: tuple[float, float] | None
    decided_on: str
    steady: bool
    cause: str | None
    entry: dict = field(repr=False, compare=False)

    @classmethod
    def from_entry(cls, entry: dict) -> Latency:
        """One ``results.latency.per_shape`` entry of a verified predicate."""
        from edgequal.contract.preemption import decided_on_clean, decisive_summary

        s = decisive_summary(entry)
        figures = {k: s.get(k) for k in _SUMMARY_KEYS}
        for k in ("p50_ci_ms", "p99_ci_ms"):
            figures[k] = tuple(figures[k]) if figures[k] else None
        return cls(
            shape=entry["shape"],
            **figures,
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
        return LatencyTable([Latency.from_entry(e) for e in per_shape])

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
