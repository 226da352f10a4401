"""``edgequal-agent serve --metrics-textfile PATH``: the agent's own state as OpenMetrics
text for node_exporter's textfile collector, rewritten (by rename) every few seconds.

What it holds: whether the device is busy (a lease or a run), the run in progress, the
last status per model (from the signed reports it stored), and the board's temperatures
at rest: read only while nothing measures, so a dashboard's idle temperature is never a
loaded one; a board without readable thermal zones shows none. Standard library only.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from pathlib import Path

from edgequal.contract import __version__
from edgequal.contract.openmetrics import Gauge, render, write_textfile
from edgequal.contract.signing import STATUSES

log = logging.getLogger(__name__)

INITIAL_REPORTS = 50
"""How many of the newest stored reports are read at start for the last status per model."""


def report_verdict(envelope: bytes) -> tuple[str, str] | None:
    """(model name, status) of a stored report, or None when unreadable.

    The agent reads its own reports here, to show them: nothing is verified or trusted.
    """
    try:
        statement = json.loads(base64.b64decode(json.loads(envelope)["payload"]))
        predicate = statement["predicate"]
        model = statement["subject"][0]["name"]
        status = predicate["status"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return str(model), str(status)


class MetricsTextfile:
    """Keeps ``path`` current for one agent (its run slot, its reports, its probe root)."""

    def __init__(self, path: Path, service, interval_s: float = 15.0):
        self.path = Path(path)
        self.service = service
        self.interval_s = float(interval_s)
        self.last: dict[str, tuple[str, float]] = {}
        self._seen: set[str] = set()
        self._at_rest: list[tuple[dict, float]] = []
        self._at_rest_when: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-textfile", daemon=True)
        self._read_reports(initial=True)

    def _reports_dir(self) -> Path:
        return Path(self.service.runs.report_path("x")).parent

    def _read_reports(self, initial: bool = False) -> None:
        """The last status per model from reports not read before (oldest first)."""
        try:
            files = sorted(self._reports_dir().glob("*.dsse.json"), key=lambda p: p.stat().st_mtime)
        except OSError:
            return
        if initial:
            self._seen.update(p.name for p in files[:-INITIAL_REPORTS])
            files = files[-INITIAL_REPORTS:]
        for p in files:
            if p.name in self._seen:
                continue
            self._seen.add(p.name)
            try:
                verdict = report_verdict(p.read_bytes())
            except OSError:
                continue
            if verdict is not None:
                model, status = verdict
                self.last[model] = (status, p.stat().st_mtime)

    def _read_temperatures(self) -> None:
        from ..probes.thermal import read_thermal, usable_zones

        zones = usable_zones(read_thermal(self.service.root).get("zones") or [])
        self._at_rest = [({"zone": z["name"], "type": z["type"] or ""}, z["temp_c"]) for z in zones]
        self._at_rest_when = time.time()

    def render(self) -> str:
        """The file's text now (reports and temperatures read first, when idle)."""
        self._read_reports()
        slot = self.service.slot
        lease, current = slot.lease(), slot.current()
        if lease is None and current is None:
            self._read_temperatures()
        busy = Gauge("edgequal_agent_busy", "1 while a lease or a run holds the device")
        busy.add({}, lease is not None or current is not None)
        run = Gauge("edgequal_agent_run", "the run in progress (its id as a label)")
        if current is not None:
            run.add({"run_id": current.lease.run_id, "holder": current.lease.holder}, 1)
        status = Gauge("edgequal_agent_last_status", "1 for the last report's status per model")
        when = Gauge(
            "edgequal_agent_last_report_timestamp_seconds", "when it was stored", "seconds"
        )
        for model, (s, t) in sorted(self.last.items()):
            for name in STATUSES:
                status.add({"model": model, "status": name}, name == s)
            when.add({"model": model}, t)
        temp = Gauge(
            "edgequal_agent_temperature_at_rest_celsius",
            "thermal zones read while nothing measured",
            "celsius",
        )
        for labels, value in self._at_rest:
            temp.add(labels, value)
        rest = Gauge(
            "edgequal_agent_temperature_at_rest_timestamp_seconds", "when they were read", "seconds"
        )
        rest.add({}, self._at_rest_when if self._at_rest else None)
        info = Gauge("edgequal_agent_info", "the agent's version")
        info.add({"version": __version__}, 1)
        return render([busy, run, status, when, temp, rest, info])

    def write(self) -> None:
        """Rewrite the file now."""
        write_textfile(self.path, self.render())

    def _loop(self) -> None:
        while True:
            try:
                self.write()
            except Exception:  # a full disk or a broken probe must not stop the agent
                log.exception("writing %s failed", self.path)
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> MetricsTextfile:
        """Write now, then every ``interval_s`` until :meth:`stop`."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop rewriting (the file stays as last written)."""
        self._stop.set()
        self._thread.join(5)
