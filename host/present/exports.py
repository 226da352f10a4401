"""Verified reports for dashboards: github-action-benchmark JSON and OpenMetrics text
(``edgequal export``, ``fleet run --prometheus``; docs/api.md "Exports").

- ``github-benchmark``: the ``customSmallerIsBetter`` entries the action reads, a JSON
  list of ``{name, unit, value, range, extra}``: latency p50 and p99 per shape (range:
  the half-width of the 95 % order-statistic interval), cold load to first result,
  milliseconds per inference over the sustained phase, millijoules per inference, worst
  drift per output. Only figures that are smaller-is-better appear, each once.
- ``prometheus``: labelled gauges per device, model and shape: p50/p99 seconds, peak and
  sustained throughput, stability, energy, drift, decision flips, and the status (one
  gauge per status, 1 for the report's own).

Only verified reports are exported, and only what they measured: an absent figure is
left out, never written as zero. Only a ``passed`` or ``degraded`` report's figures are
charted (``lab/results.OK_STATUSES``, the points of a history series): a ``failed``
report's are not the model's on a working board, an ``inconclusive`` one's are the
interference's, an ``incomplete`` one's are missing. github-benchmark leaves such a
report out (the action has no way to mark an entry, and ``extra`` does not keep it off
the chart) and Prometheus exports its ``edgequal_status`` only, so a failed run reads
as failed, never as a 0 or a figure.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgequal.contract.openmetrics import Gauge, render

from ..lab.results import OK_STATUSES

if TYPE_CHECKING:  # the CLI reads EXPORTS for --format: nothing heavy at import
    from ..judge.report_file import ReportFile


def charted(report: ReportFile) -> bool:
    """Whether a dashboard may chart the report's figures (passed or degraded)."""
    return report.predicate.get("status") in OK_STATUSES


def left_out(reports: Iterable[ReportFile]) -> list[ReportFile]:
    """The reports whose figures an export leaves out (failed, inconclusive, incomplete)."""
    return [r for r in reports if not charted(r)]


def _labels(report: ReportFile) -> dict[str, str]:
    return {"device": report.device_name or "", "model": report.model_name or ""}


def _shape_entries(report: ReportFile) -> list[tuple[str, dict]]:
    from edgequal.contract.preemption import decisive_summary

    per_shape = ((report.predicate.get("results") or {}).get("latency") or {}).get("per_shape")
    return [(e["shape"], decisive_summary(e)) for e in per_shape or []]


def github_benchmark(reports: Iterable[ReportFile]) -> list[dict]:
    """The ``customSmallerIsBetter`` entries of every report (see the module doc)."""
    out = []
    for r in reports:
        pred, results = r.predicate, r.predicate.get("results") or {}
        if not charted(r):
            continue
        where = f"{r.model_name} on {r.device_name}"
        extra = f"run {pred.get('run_id')}, status {pred.get('status')}"

        def entry(name, unit, value, spread=None, more="", where=where, extra=extra):
            if value is None:
                return
            item = {"name": f"{where}: {name}", "unit": unit, "value": round(float(value), 6)}
            if spread is not None:
                item["range"] = f"± {spread:.4g}"
            item["extra"] = extra + (f"; {more}" if more else "")
            out.append(item)

        for shape, s in _shape_entries(r):
            for key, label, ci in (("p50_ms", "p50", "p50_ci_ms"), ("p99_ms", "p99", "p99_ci_ms")):
                value, interval = s.get(key), s.get(ci)
                spread = (
                    max(interval[1] - value, value - interval[0])
                    if value is not None and interval
                    else None
                )
                entry(f"latency {label} [{shape}]", "ms", value, spread, f"n={s.get('count')}")
        cold = results.get("cold_load") or {}
        entry(
            "cold load to first result (median)", "ms", (cold.get("total_ms") or {}).get("median")
        )
        sustained = results.get("sustained") or {}
        rate = sustained.get("sustained_per_s")
        entry(
            "sustained time per inference",
            "ms",
            1e3 / rate if rate else None,
            more=f"stability {sustained.get('stability')}",
        )
        power = (sustained.get("power") or {}).get("summary") or {}
        entry("energy per inference (median)", "mJ", power.get("mj_per_inference_median"))
        for output, d in ((results.get("drift") or {}).get("outputs") or {}).items():
            entry(f"drift max abs error [{output}]", "", d.get("max_abs"))
    return out


def prometheus(reports: Iterable[ReportFile]) -> str:
    """OpenMetrics text of every report's figures (see the module doc)."""
    from edgequal.contract.signing import STATUSES

    g = {
        "p50": Gauge(
            "edgequal_latency_p50_seconds", "warm latency p50 (decisive calls)", "seconds"
        ),
        "p99": Gauge(
            "edgequal_latency_p99_seconds", "warm latency p99 (decisive calls)", "seconds"
        ),
        "peak": Gauge("edgequal_peak_inferences_per_second", "best sustained-phase window"),
        "rate": Gauge("edgequal_sustained_inferences_per_second", "median of the last windows"),
        "stability": Gauge(
            "edgequal_sustained_stability_ratio", "worst over best scored window", "ratio"
        ),
        "energy": Gauge(
            "edgequal_energy_per_inference_joules", "median energy per inference", "joules"
        ),
        "watts": Gauge("edgequal_power_watts", "median board power over the windows"),
        "drift": Gauge("edgequal_drift_max_abs_error", "worst absolute error per output"),
        "psnr": Gauge("edgequal_drift_psnr_db", "PSNR against the golden set per output (dB)"),
        "flips": Gauge("edgequal_decision_flips", "decisions flipped against the golden set"),
        "status": Gauge("edgequal_status", "1 for the report's status, 0 for the others"),
        "finished": Gauge(
            "edgequal_report_finished_timestamp_seconds", "when the device signed it", "seconds"
        ),
    }
    for r in reports:
        base, pred = _labels(r), r.predicate
        for status in STATUSES:
            g["status"].add({**base, "status": status}, status == pred.get("status"))
        if not charted(r):
            continue  # its status only: failed, inconclusive or incomplete, never a figure
        results = pred.get("results") or {}
        for shape, s in _shape_entries(r):
            for key in ("p50", "p99"):
                ms = s.get(f"{key}_ms")
                g[key].add({**base, "shape": shape}, ms / 1e3 if ms is not None else None)
        sustained = results.get("sustained") or {}
        g["peak"].add(base, sustained.get("peak_per_s"))
        g["rate"].add(base, sustained.get("sustained_per_s"))
        g["stability"].add(base, sustained.get("stability"))
        power = (sustained.get("power") or {}).get("summary") or {}
        mj = power.get("mj_per_inference_median")
        g["energy"].add(base, mj / 1e3 if mj is not None else None)
        g["watts"].add(base, power.get("power_w_median"))
        drift = results.get("drift") or {}
        for output, d in (drift.get("outputs") or {}).items():
            g["drift"].add({**base, "output": output}, d.get("max_abs"))
            g["psnr"].add({**base, "output": output}, d.get("psnr_db"))
        g["flips"].add(base, (drift.get("decisions") or {}).get("flip_count"))
        g["finished"].add(base, _timestamp(pred.get("finished_at")))
    return render(g.values())


@dataclass(frozen=True)
class ExportFormat:
    """One export format, declared once: its name, what it makes of verified reports, the
    text of its file, and its line in ``--format``'s help and the docs."""

    name: str
    render: Callable[[Iterable[ReportFile]], object]
    text: Callable[[object], str]
    help: str


EXPORTS: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat(
            "github-benchmark",
            github_benchmark,
            lambda entries: json.dumps(entries, indent=1) + "\n",
            "customSmallerIsBetter JSON for github-action-benchmark",
        ),
        ExportFormat(
            "prometheus",
            prometheus,
            str,
            "OpenMetrics text for node_exporter's textfile collector",
        ),
        ExportFormat(
            "cyclonedx",
            lambda reports: _bom(reports),
            lambda document: json.dumps(document, indent=1) + "\n",
            "a CycloneDX 1.6 ML-BOM (model, golden set, runtimes, device, model card)",
        ),
    )
}
FORMATS = tuple(EXPORTS)


def _bom(reports: Iterable[ReportFile]) -> dict:
    """host/present/bom.py's ML-BOM (cyclonedx-python-lib is imported only for it)."""
    from .bom import cyclonedx

    return cyclonedx(reports)


def _timestamp(text) -> float | None:
    """Unix seconds of an ISO 8601 UTC time, or None."""
    try:
        when = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo else None


class PrometheusDirectory:
    """``fleet run --prometheus DIR``: after each cell, ``DIR/DEVICE.prom`` holds the figures
    of every finished report of that device (replaced by rename)."""

    def __init__(self, directory: Path, known, out_dir: Path):
        self.directory = Path(directory)
        self.known = known
        self.out_dir = Path(out_dir)
        self._reports: dict[str, dict[str, Path]] = {}
        self._lock = threading.Lock()

    def on_change(self, record) -> None:
        """A fleet record changed; once it has its report, rewrite its device's file."""
        from edgequal.contract.openmetrics import write_textfile

        from ..judge.report_file import load_report

        if not record.report or record.status is None:
            return
        with self._lock:
            mine = self._reports.setdefault(record.device, {})
            mine[record.model] = self.out_dir / record.report
            files = [
                load_report(p, known=self.known, device=record.device, require=True)
                for p in mine.values()
            ]
            self.directory.mkdir(parents=True, exist_ok=True)
            write_textfile(self.directory / f"{record.device}.prom", prometheus(files))
