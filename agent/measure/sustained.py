"""The sustained phase: closed-loop inference for minutes while the board heats.

The worker runs the loop and reports each window; the agent process samples
telemetry at 1 Hz (never the worker) and lines samples up with windows by
CLOCK_MONOTONIC. Scoring is pure (``score_windows``) and tested on known inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

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
        self.idle_c = None

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
    flags = sample.get("throttled") or {}
    now = flags.get("now", flags) if isinstance(flags, dict) else {}
    cooling = any((v or 0) > 0 for v in (sample.get("cooling") or {}).values())
    return bool(
        now.get("throttled") or now.get("freq_capped") or now.get("soft_temp_limit") or cooling
    )


def _under_voltage(sample: dict) -> bool:
    flags = sample.get("throttled") or {}
    now = flags.get("now", flags) if isinstance(flags, dict) else {}
    return bool(now.get("under_voltage"))


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


def score_windows(
    windows: Sequence[dict], started_at: float, max_clock_khz: float | None = None
) -> dict:
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
    clock_ref = max_clock_khz or max((w.get("max_clock_khz") or 0) for w in windows) or None

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
    within_c: float = 5.0,
    max_slope_c_per_min: float = 0.5,
    interval_s: float = 1.0,
    cancel=None,
) -> dict:
    """Wait until the temperature is within ``within_c`` of idle and its slope < 0.5 °C/min.

    With no temperature sensor there is nothing to wait for: that is recorded as such.
    Gives up at ``timeout_s`` and records that it did.
    """
    first = read_temp_c()
    if first is None:
        return {"waited_s": 0.0, "reached": None, "reason": "no temperature sensor"}
    idle = idle_c if idle_c is not None else first
    start = time.monotonic()
    history = [(start, first)]
    while True:
        now = time.monotonic()
        temp = read_temp_c()
        if temp is not None:
            history.append((now, temp))
        recent = [h for h in history if now - h[0] <= 30.0]
        slope = 0.0
        if len(recent) >= 2 and recent[-1][0] > recent[0][0]:
            slope = (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0]) * 60.0
        long_enough = now - start >= min(10.0, timeout_s) or len(recent) >= 10
        if (
            temp is not None
            and temp - idle <= within_c
            and abs(slope) < max_slope_c_per_min
            and (long_enough or temp <= idle)
        ):
            return {
                "waited_s": round(now - start, 1),
                "reached": True,
                "temp_c": temp,
                "idle_c": idle,
            }
        if now - start >= timeout_s or (cancel is not None and cancel.is_set()):
            return {
                "waited_s": round(now - start, 1),
                "reached": False,
                "temp_c": temp,
                "idle_c": idle,
                "reason": f"cooldown timeout after {timeout_s:g} s",
            }
        time.sleep(interval_s)
