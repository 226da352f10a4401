"""The sustained phase: closed-loop inference in windows while the agent samples the board.

Cooldown first, idle power where rails exist, then one worker runs the closed loop
(``measure/sustained.py``) while this process samples telemetry, power and the
competition for CPU at 1 Hz; the windows are scored and attributed
(``measure/attribution.py``). A declared co-load runs beside it throughout.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from edgequal.contract.plan import Plan

from ..measure.attribution import attribute_windows, contention_between, declared_cpus
from ..measure.sustained import INTERFERENCE_EXTENSION
from ..measure.throttle import measured_clocks_khz
from ..measure.timed_outputs import phase_timed_outputs, place_mismatches
from ..worker.jobs import SustainSettings, WorkerJob
from ..worker.supervisor import Worker
from .coload import coload_finding, start_for_phase
from .workers import EventSink, finding_from, run_sampled


def measure_sustained(
    model,
    golden,
    plan: Plan,
    runtime,
    root: Path,
    emit: EventSink,
    cancel,
    findings,
    idle_c=None,
    coload=None,
) -> dict:
    """Closed-loop inference in windows; telemetry and contention sampled at 1 Hz by this process.

    ``idle_c`` is the temperature before the run loaded the board: the cooldown waits
    to get back within 5 °C of it.
    """
    from ..probes.cooldown import wait_for_cooldown
    from ..probes.power import PowerProbe
    from ..probes.telemetry import BoardTelemetry

    telemetry = BoardTelemetry.open(root)
    power_probe = PowerProbe.open(root)
    cooldown = {"waited_s": 0.0, "reached": None, "reason": "no temperature sensor"}
    if telemetry.has_temperature and plan.cooldown:
        emit({"type": "progress", "phase": "sustained", "message": "waiting for cooldown"})
        cooldown = wait_for_cooldown(
            telemetry.read_temp_c, idle_c, plan.cooldown_timeout_s, cancel=cancel
        )
    loop = _Loop(plan, telemetry, emit)
    # The board's own passive trip when its thermal zones expose one, else the profile's.
    trip_c = telemetry.trip_c if telemetry.trip_c is not None else plan.trip_c
    trip_source = "sysfs" if telemetry.trip_c is not None else "profile" if trip_c else None
    # Idle power: the board at rest after the cooldown, before the worker loads it.
    idle, power_sampler = _start_power(power_probe, plan, emit, cancel)
    run = None
    if coload:
        run = start_for_phase(coload, plan, cancel, emit, findings, runtime, "sustained", False)
        if run is None:
            return {
                "duration_s": loop.duration,
                "verdict": "failed",
                "reason": findings[-1]["message"],
            }
    telemetry.start()
    try:
        ended, contention, sampler = run_sampled(
            WorkerJob.for_phase(
                "sustained",
                model,
                golden,
                plan,
                runtime,
                sustain=SustainSettings(duration_s=loop.hard_limit_s, window_s=loop.window_s),
                probe_root=str(root),
            ),
            on_worker_started=lambda worker, sampler: threading.Thread(
                target=loop.watch_temperature, args=(worker, sampler), daemon=True
            ).start(),
            phase_timeout_s=plan.phase_timeout_s
            + loop.hard_limit_s
            + loop.spare_windows * loop.window_s,
            memory_limit_mb=plan.memory_limit_mb,
            declared_pgids=run.pgids if run else (),
            on_event=loop.on_event,
            cancel=cancel,
        )
    finally:
        loop.watcher_done.set()
        samples = telemetry.stop()
        power_samples = power_sampler.stop() if power_sampler else []
        if run is not None:
            run.stop()
    result: dict = {
        "duration_s": loop.duration,
        "window_s": loop.window_s,
        "cooldown": cooldown,
        "trip_c": trip_c,
        "trip_c_source": trip_source,
        "max_temp_c_limit": loop.max_c,
        "telemetry": telemetry.describe(),
    }
    if run is not None:
        result["coload"] = True
        span_s = contention[-1]["t"] - contention[0]["t"] if len(contention) > 1 else 0.0
        result["coload_achieved"] = run.achieved(
            None, declared_cpus(contention, run.pgids, sampler.clock_ticks_per_s, span_s)
        )
        if run.ended_early():
            findings.append(coload_finding("sustained", run.ended_early(), runtime))
    if not ended.ok:
        findings.append(finding_from(ended, "sustained", runtime))
        result.update(
            {"windows_detail": loop.windows, "verdict": "failed", "reason": ended.describe()}
        )
        return result
    power = (power_probe, idle, power_samples)
    return _scored(result, loop, ended, samples, (contention, sampler), trip_c, power)


def _start_power(power_probe, plan: Plan, emit: EventSink, cancel):
    """Where the board has power rails: its idle power measured first (``plan.idle_power_s``)
    and a sampler started for the run; ``(idle, sampler)``, each None where there is none."""
    from ..measure.energy import idle_power
    from ..probes.power import PowerSampler

    if not power_probe.present:
        return None, None
    idle = None
    if plan.idle_power_s > 0:
        emit({"type": "progress", "phase": "sustained", "message": "measuring idle power"})
        idle_sampler = PowerSampler(power_probe)
        idle_sampler.start()
        cancel.wait(plan.idle_power_s)
        idle = idle_power(idle_sampler.stop())
    power_sampler = PowerSampler(power_probe)
    power_sampler.start()
    return idle, power_sampler


class _Loop:
    """The sustained loop's live state while the worker runs: its windows as they arrive,
    windows added for those interference took, and the temperature watch that stops the
    worker at the maximum temperature or ends a soak once the board stops heating."""

    def __init__(self, plan: Plan, telemetry, emit: EventSink):
        self.telemetry, self.emit = telemetry, emit
        self.duration = plan.sustain_s
        self.window_s = plan.sustain_window_s
        self.planned_windows = max(1, round(self.duration / self.window_s)) if self.window_s else 1
        # soak: keep going past the planned duration (up to sustain_extend_to_s) while the
        # temperature still rises faster than 0.5 °C/min; the worker runs until told to stop.
        self.hard_limit_s = max(self.duration, plan.sustain_extend_to_s or 0.0)
        self.extended = False
        # A full window that interference took is replaced: the worker runs one window more
        # for each, up to INTERFERENCE_EXTENSION of the planned windows.
        self.spare_windows = int(self.planned_windows * INTERFERENCE_EXTENSION)
        self.added_windows = 0
        self.running: dict = {}
        self.max_c = plan.max_temp_c
        self.throttle_indicators = plan.throttle_indicators
        self.windows: list[dict] = []
        self.stop_reason: str | None = None
        self.t_begin = time.monotonic()
        self.watcher_done = threading.Event()
        self.live_evidence: dict[int, dict | None] = {}

    def on_event(self, event: dict) -> None:
        if event.get("event") != "window":
            return
        keys = ("index", "t0", "t1", "count", "rate_per_s", "p50_ms", "p90_ms", "partial")
        keys += ("sched_ns",)
        w = {k: event[k] for k in keys}
        self.windows.append(w)
        if not w["partial"] and "worker" in self.running:
            wanted = min(self.interfered_so_far(self.running["sampler"]), self.spare_windows)
            while self.added_windows < wanted:
                self.running["worker"].add_window()
                self.added_windows += 1
        self.emit(
            {
                "type": "progress",
                "phase": "sustained",
                "done": round(w["t1"] - self.t_begin, 1),
                "total": self.duration,
                "rate_per_s": round(w["rate_per_s"], 2),
                "temp_c": self.telemetry.latest_temp_c(),
            }
        )

    def interfered_so_far(self, sampler) -> int:
        """Full windows so far whose drop interference explains, judged as at the end but
        without throttle evidence (an extra window costs time, never a wrong verdict: the
        end's scoring has the telemetry). A window's contention is read once a sample
        after its end exists."""
        contention = sampler.snapshot()
        done = [dict(w) for w in list(self.windows) if not w.get("partial")]
        for w in done:
            index = w["index"]
            if index not in self.live_evidence and contention and contention[-1]["t"] >= w["t1"]:
                self.live_evidence[index] = contention_between(
                    contention, w["t0"], w["t1"], sampler.cpu_count, sampler.clock_ticks_per_s,
                    w.get("sched_ns"),
                )  # fmt: skip
            w["throttle_reasons"] = []
            w["interference"] = self.live_evidence.get(index)
        if not done:
            return 0
        attribute_windows(done)
        return sum(w["cause"] == "interference" for w in done)

    def watch_temperature(self, worker: Worker, sampler) -> None:
        self.running.update(worker=worker, sampler=sampler)
        while not self.watcher_done.wait(1.0):
            temp = self.telemetry.latest_temp_c()
            if self.max_c is not None and temp is not None and temp >= self.max_c:
                self.stop_reason = (
                    f"stopped early: {temp:.1f} °C reached the maximum {self.max_c:g} °C"
                )
                worker.request_stop()
                return
            if (
                self.hard_limit_s > self.duration
                and time.monotonic() - self.t_begin >= self.duration
            ):
                slope = self.telemetry.slope_c_per_min(last_s=60.0)
                if slope is None or slope <= 0.5:
                    worker.request_stop()
                    return
                self.extended = True


def _scored(result: dict, loop: _Loop, ended, samples, contended, trip_c, power) -> dict:
    """The windows given their telemetry, contention and energy, then scored (peak,
    sustained, stability, verdict), with the outputs checked while timed and the samples."""
    from ..measure.energy import window_energy
    from ..measure.sustained import nominal_clocks_khz, score_windows, window_telemetry

    contention, sampler = contended
    power_probe, idle, power_samples = power
    windows = loop.windows
    nominal = nominal_clocks_khz(samples)
    for w in windows:
        w.update(window_telemetry(w, samples, trip_c, nominal, loop.throttle_indicators))
        w["interference"] = contention_between(
            contention,
            w["t0"],
            w["t1"],
            sampler.cpu_count,
            sampler.clock_ticks_per_s,
            w.pop("sched_ns"),
        )
    idle_w = idle["watts"] if idle else None
    if power_probe.present:
        for w in windows:
            w["energy"] = window_energy(w, power_samples, idle_w)
    started_at = ended.result["started_at"]
    result["power"] = _power_result(power_probe, idle, windows, power_samples, started_at)
    score = score_windows(windows, started_at, loop.planned_windows)
    if trip_c is not None and score.get("peak_temp_c") is not None:
        score["headroom_c"] = round(trip_c - score["peak_temp_c"], 2)
    result.update(score)
    result["windows_detail"] = windows
    if "timed_outputs" in ended.result:
        checked = place_mismatches(
            ended.result["timed_outputs"], samples, windows, loop.telemetry.has_temperature
        )
        result["timed_outputs"] = phase_timed_outputs([checked])
    result["loop_started_monotonic_s"] = started_at  # CLOCK_MONOTONIC: the board's own logs
    result["telemetry_samples"] = [_flat_sample(s, started_at) for s in samples]
    if loop.stop_reason:
        result["stopped_early"] = loop.stop_reason
    if loop.extended:
        result["extended_to_s"] = round(windows[-1]["t1"] - started_at, 1) if windows else None
    if loop.added_windows:
        result["windows_added"] = loop.added_windows
    return result


def _power_result(probe, idle, windows, samples, started_at) -> dict:
    """The sustained phase's power figures, or why there are none (never an estimate)."""
    from ..measure.energy import energy_summary

    described = probe.describe()
    if not described["present"]:
        return described
    totals = [s.get("total_from") for s in samples if s.get("total_from")]
    return {
        **described,
        "total_from": totals[-1] if totals else None,
        "idle": idle,
        "summary": energy_summary([{**w, **(w.get("energy") or {})} for w in windows]),
        "samples": [
            {"t": round(s["t"] - started_at, 3), "total_w": s["total_w"], "rails_w": s["rails_w"]}
            for s in samples
        ],
    }


def _flat_sample(sample: dict, started_at: float) -> dict:
    """A 1 Hz telemetry sample for the report: seconds from the loop start, the lowest clock."""
    clocks = [c for c in (sample.get("clocks_khz") or {}).values() if c]
    clocks += measured_clocks_khz(sample)
    return {
        "t": round(sample["t"] - started_at, 3),
        "temp_c": sample.get("temp_c"),
        "clock_khz": min(clocks) if clocks else None,
        "throttled": sample.get("throttled"),
        "cooling": sample.get("cooling_states") or {},
    }
