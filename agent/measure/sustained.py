"""The sustained phase: closed-loop inference for minutes while the board heats.

The worker runs the loop and reports each window; the agent process samples
telemetry at 1 Hz (never the worker) and lines samples up with windows by
CLOCK_MONOTONIC. Scoring is pure (``score_windows``) and tested on known inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..probes.raspberry_pi import throttle_active
from .stats import first_drop_time_s, peak_rate, stability, sustained_rate, sustained_verdict


class AgentTelemetry:
    """The agent-side view of the board's sensors for one sustained run.

    Wraps the 1 Hz ``TelemetrySampler`` and flattens its samples to
    ``{"t": monotonic s, "temp_c", "clock_khz", "throttled", "cooling"}`` so windows
    (timed by the worker on the same clock) can be scored against them. With no
    sensors at all it still runs and reports ``absent``.
    """

    def __init__(self, sampler, thermal: dict):
        self._sampler = sampler
        self.trip_c = thermal.get("trip_c")
        self.has_temperature = bool(sampler.has_temperature)

    @classmethod
    def open(cls, root) -> AgentTelemetry:
        """Discover sensors under ``root`` (the configurable probe root)."""
        from ..probes.telemetry import TelemetrySampler
        from ..probes.thermal import read_thermal

        return cls(TelemetrySampler(root, interval_s=1.0), read_thermal(root))

    def read_temp_c(self) -> float | None:
        """Read the authoritative temperature now."""
        return self._sampler.sample_once()["temp_c"]

    def latest_temp_c(self) -> float | None:
        """The temperature of the newest 1 Hz sample."""
        samples = self._sampler.samples()
        return samples[-1]["temp_c"] if samples else None

    def slope_c_per_min(self, last_s: float) -> float | None:
        """Temperature slope over the last ``last_s`` seconds of samples (°C/min), None without readings."""
        from ..probes.telemetry import slope_c_per_min

        samples = self._sampler.samples()
        if not samples:
            return None
        recent = [x for x in samples if x["t_s"] >= samples[-1]["t_s"] - last_s]
        return slope_c_per_min(recent)

    def _flat(self, s: dict) -> dict:
        clocks = [c for c in (s.get("clocks_khz") or {}).values() if c]
        if s.get("arm_clock_khz"):
            clocks.append(
                s["arm_clock_khz"]
            )  # the Pi's measured clock beats cpufreq's requested one
        return {
            "t": self._sampler.start_monotonic + s["t_s"],
            "temp_c": s.get("temp_c"),
            "clock_khz": min(clocks) if clocks else None,
            "throttled": s.get("throttled"),
            "cooling": s.get("cooling_states") or {},
        }

    def start(self) -> None:
        """Start the 1 Hz sampling thread."""
        self._sampler.start()

    def samples(self) -> list[dict]:
        """Samples so far, flattened."""
        return [self._flat(s) for s in self._sampler.samples()]

    def stop(self) -> list[dict]:
        """Stop sampling; every sample, flattened."""
        self._sampler.stop()
        return self.samples()

    def describe(self) -> str | dict:
        """``absent`` when the board exposes no temperature sensor, else which zones were read."""
        if not self.has_temperature:
            return "absent"
        return {"zones": self._sampler.zone_types}


def _throttle_now(sample: dict) -> bool:
    """A firmware throttle bit set now, or a CPU cooling device engaged."""
    cooling = any((v or 0) > 0 for v in (sample.get("cooling") or {}).values())
    return throttle_active(sample.get("throttled")) or cooling


def _under_voltage(sample: dict) -> bool:
    flags = sample.get("throttled")
    return bool(flags and flags["now"]["under_voltage"])


def window_telemetry(window: dict, samples: Sequence[dict], trip_c: float | None) -> dict:
    """Max temperature, clocks and throttle state of the samples inside one window."""
    inside = [s for s in samples if window["t0"] <= s["t"] <= window["t1"]]
    temps = [s["temp_c"] for s in inside if s.get("temp_c") is not None]
    clocks = [s["clock_khz"] for s in inside if s.get("clock_khz")]
    max_temp = max(temps) if temps else None
    over_trip = trip_c is not None and max_temp is not None and max_temp >= trip_c
    return {
        "max_temp_c": max_temp,
        "min_clock_khz": min(clocks) if clocks else None,
        "max_clock_khz": max(clocks) if clocks else None,
        "throttle_flags": any(_throttle_now(s) for s in inside),
        "under_voltage": any(_under_voltage(s) for s in inside),
        "over_trip": over_trip,
        "samples": len(inside),
    }


def score_windows(windows: Sequence[dict], started_at: float) -> dict:
    """Peak, sustained, stability, first throttle, 3 % drop and the verdict, from scored windows.

    A window counts as throttled when a throttle flag was set, its temperature reached
    the trip point, or the clock fell below 95 % of the maximum seen.
    """
    if not windows:
        return {"windows": 0, "verdict": "failed", "reason": "no complete window"}
    # A partial window (the run was stopped inside it) counts for temperature and
    # throttling, not for throughput: its rate over a fraction of a window is noise.
    full = [w for w in windows if not w.get("partial")] or list(windows)
    rates = [w["rate_per_s"] for w in full]
    starts = [w["t0"] - started_at for w in full]
    peak = peak_rate(rates)
    sustained = sustained_rate(rates)
    clock_ref = max((w.get("max_clock_khz") or 0) for w in windows) or None

    def throttled(w: dict) -> bool:
        low_clock = clock_ref and w.get("min_clock_khz") and w["min_clock_khz"] < 0.95 * clock_ref
        return bool(w.get("throttle_flags") or w.get("over_trip") or low_clock)

    first_throttle = next((w["t0"] - started_at for w in windows if throttled(w)), None)
    temps = [w["max_temp_c"] for w in windows if w.get("max_temp_c") is not None]
    stab = stability(rates)
    under_voltage = any(w.get("under_voltage") for w in windows)
    return {
        "windows": len(full),
        "peak_per_s": peak,
        "sustained_per_s": sustained,
        "stability": stab,
        "sustained_over_peak": sustained / peak if peak else None,
        "time_to_first_throttle_s": first_throttle,
        "time_to_3pct_drop_s": first_drop_time_s(starts, rates, peak, 0.03),
        "peak_temp_c": max(temps) if temps else None,
        "throttled": first_throttle is not None,
        "under_voltage": under_voltage,
        "verdict": sustained_verdict(stab, first_throttle is not None, under_voltage, False),
    }


def wait_for_cooldown(
    read_temp_c: Callable[[], float | None],
    idle_c: float | None,
    timeout_s: float,
    interval_s: float = 1.0,
    cancel=None,
    min_span_s: float = 10.0,
) -> dict:
    """Wait until the temperature is within 5 °C of idle and its slope is < 0.5 °C/min.

    ``idle_c`` is the temperature before the run loaded the board (None: the first
    reading here). The slope is judged over the last 30 s, after at least ``min_span_s``
    of readings (``idle_cooldown_ok``). With no sensor there is nothing to wait for, and
    that is recorded; at ``timeout_s`` it gives up and records that it did.
    """
    from ..probes.telemetry import idle_cooldown_ok

    first = read_temp_c()
    if first is None:
        return {"waited_s": 0.0, "reached": None, "reason": "no temperature sensor"}
    idle = idle_c if idle_c is not None else first
    start = time.monotonic()
    samples = [{"t_s": 0.0, "temp_c": first}]
    while True:
        time.sleep(interval_s)
        elapsed = time.monotonic() - start
        samples.append({"t_s": elapsed, "temp_c": read_temp_c()})
        recent = [x for x in samples if elapsed - x["t_s"] <= 30.0]
        if elapsed >= min(min_span_s, timeout_s) and idle_cooldown_ok(recent, idle):
            return {
                "waited_s": round(elapsed, 1),
                "reached": True,
                "temp_c": samples[-1]["temp_c"],
                "idle_c": idle,
            }
        if elapsed >= timeout_s or (cancel is not None and cancel.is_set()):
            return {
                "waited_s": round(elapsed, 1),
                "reached": False,
                "temp_c": samples[-1]["temp_c"],
                "idle_c": idle,
                "reason": f"cooldown timeout after {timeout_s:g} s",
            }
