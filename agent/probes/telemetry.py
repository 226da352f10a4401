"""Telemetry sampled at 1 Hz by the agent process while a worker runs the model.

The sampler is a daemon thread in the agent, never in the worker: a worker stopped
or slowed by throttling must not stop its own measurement (DESIGN.md, measurement.md
§6.4). Each tick reads a handful of small files found once at construction: the
temperature of every reliable thermal zone, each cpufreq policy's current clock, the
state of CPU-throttling cooling devices, and each board family's own fields (its probe's
``telemetry_reader``: a Raspberry Pi's firmware throttle flags and measured ARM clock).

Files are opened for every read rather than kept open: sysfs regenerates an
attribute on each open, and a tree written by replacing files (the device emulator,
a recorded tree being updated) stays correct.

The pure helpers below (:func:`slope_c_per_min`, :func:`idle_cooldown_ok`) work on the
sample dicts; which of a sample's indicators count as throttling is the measurement's rule,
``agent/measure/throttle.py``.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections.abc import Iterable, Mapping

from edgequal.agent.config import probe_root
from edgequal.agent.probes.cpufreq import policy_dirs
from edgequal.agent.probes.registry import board_probes
from edgequal.agent.probes.sysfs import parse_int, read_value
from edgequal.agent.probes.thermal import (
    MAX_PLAUSIBLE_C,
    is_junction_zone,
    is_unreliable_zone,
    list_entries,
    parse_millidegrees,
)
from edgequal.contract.board_families import BOARD_FAMILIES

log = logging.getLogger(__name__)


def is_throttle_cooling_device(device_type: str | None) -> bool:
    """True for a cooling device that slows the chip (cpufreq, devfreq, "*-throttle"); False for fans."""
    if not device_type:
        return False
    t = device_type.lower()
    if "fan" in t:
        return False
    return any(k in t for k in ("cpufreq", "devfreq", "throttle", "cpu", "gpu"))


def _temp_c(path) -> float | None:
    temp_c = parse_millidegrees(read_value(path))
    if temp_c is None or temp_c <= 0 or temp_c > MAX_PLAUSIBLE_C:
        return None
    return temp_c


class TelemetrySampler:
    """Samples temperature, clocks and throttle state every ``interval_s`` on a daemon thread.

    A sample is ``{"t_s", "temp_c", "max_temp_c", "clocks_khz", "cooling_states"}`` and
    every board family's ``telemetry_fields``: ``t_s`` seconds (monotonic) since :meth:`start`;
    ``temp_c`` the authoritative temperature (the junction zone when there is one, else
    the hottest reliable zone) and ``max_temp_c`` the hottest reliable zone, both °C or
    ``None``; ``clocks_khz`` per cpufreq policy (``cpuinfo_cur_freq`` when readable, else
    the requested ``scaling_cur_freq``); ``cooling_states`` the ``cur_state`` of
    CPU-throttling cooling devices; a family's fields from its probe's ``telemetry_reader``
    on such a board, else None (a Pi's ``arm_clock_khz`` and decoded ``throttled`` flags).
    ``use_commands=False`` runs no board command (files only).
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        interval_s: float = 1.0,
        *,
        use_commands: bool = True,
        measure_clock: bool = True,
        command_timeout_s: float = 1.0,
    ):
        self.root = probe_root(root)
        self.interval_s = float(interval_s)
        self.command_timeout_s = command_timeout_s
        # Discovery happens once: which zones to read is fixed for the run.
        self._zones: list[tuple[str, object, bool]] = []
        for path in list_entries(self.root, "thermal_zone"):
            zone_type = read_value(path / "type")
            if is_unreliable_zone(zone_type):
                continue
            self._zones.append((zone_type or path.name, path / "temp", is_junction_zone(zone_type)))
        self._policies = [
            (p.name, p / "cpuinfo_cur_freq", p / "scaling_cur_freq") for p in policy_dirs(self.root)
        ]
        self._cooling = [
            (p.name, p / "cur_state")
            for p in list_entries(self.root, "cooling_device")
            if is_throttle_cooling_device(read_value(p / "type"))
        ]
        self._family_fields = {k: None for f in BOARD_FAMILIES for k in f.telemetry_fields}
        self._family_readers = [
            reader
            for probe in board_probes()
            if probe.telemetry_reader is not None
            and (
                reader := probe.telemetry_reader(
                    self.root, use_commands, measure_clock, command_timeout_s
                )
            )
            is not None
        ]
        self._samples: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.start_monotonic: float | None = None

    @property
    def has_temperature(self) -> bool:
        """True when at least one reliable thermal zone was found."""
        return bool(self._zones)

    @property
    def zone_types(self) -> list[str]:
        """Types of the zones sampled (unreliable zones excluded)."""
        return [z[0] for z in self._zones]

    def sample_once(self) -> dict:
        """Take one sample now (``t_s`` relative to :meth:`start`, or 0 before it)."""
        now = time.monotonic()
        temps = [(name, _temp_c(path), tj) for name, path, tj in self._zones]
        readable = [t for _, t, _ in temps if t is not None]
        junction = next((t for _, t, tj in temps if tj and t is not None), None)
        max_c = max(readable) if readable else None
        clocks: dict[str, int | None] = {}
        for name, hw_path, req_path in self._policies:
            khz = parse_int(read_value(hw_path))
            clocks[name] = khz if khz is not None else parse_int(read_value(req_path))
        sample = {
            "t_s": round(now - self.start_monotonic, 3)
            if self.start_monotonic is not None
            else 0.0,
            "temp_c": junction if junction is not None else max_c,
            "max_temp_c": max_c,
            "clocks_khz": clocks,
            **self._family_fields,
            "cooling_states": {n: parse_int(read_value(p)) for n, p in self._cooling},
        }
        for read in self._family_readers:
            sample.update(read())
        return sample

    def _run(self) -> None:
        deadline = self.start_monotonic
        while True:
            try:
                sample = self.sample_once()
            except Exception:  # a sampler must outlive any one bad read
                log.exception("telemetry sample failed")
            else:
                with self._lock:
                    self._samples.append(sample)
            deadline += self.interval_s
            now = time.monotonic()
            if deadline < now:  # fell behind (slow command): skip, don't burst
                deadline = now + self.interval_s
            if self._stop.wait(deadline - now):
                return

    def start(self) -> None:
        """Start sampling; the first sample is taken at once (``t_s`` ≈ 0)."""
        if self._thread is not None:
            raise RuntimeError("TelemetrySampler already started")
        self.start_monotonic = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="edgequal-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict]:
        """Stop sampling and return every sample taken."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 3 * self.command_timeout_s + 1.0)
        return self.samples()

    def samples(self) -> list[dict]:
        """A copy of the samples so far, oldest first."""
        with self._lock:
            return list(self._samples)

    def __enter__(self) -> TelemetrySampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def linear_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope dy/dx; ``None`` with fewer than two distinct x."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    return statistics.linear_regression(xs, ys).slope


def slope_c_per_min(samples: Iterable[Mapping], key: str = "temp_c") -> float | None:
    """Least-squares temperature slope over the samples, in °C per minute (samples without a reading skipped)."""
    pts = [(s["t_s"], s[key]) for s in samples if s.get(key) is not None]
    slope = linear_slope([p[0] for p in pts], [p[1] for p in pts])
    return None if slope is None else slope * 60.0


def idle_cooldown_ok(
    samples: list[Mapping],
    idle_c: float,
    within_c: float = 5.0,
    max_slope_c_per_min: float = 0.5,
) -> bool:
    """True when the device has cooled down enough to start a phase (measurement.md §6.0).

    ``samples`` are the recent window to judge (the caller passes e.g. the last 2 min).
    True when the latest temperature is at most ``idle_c + within_c`` and the slope over
    the window is below ``max_slope_c_per_min`` (a falling temperature passes). False
    with fewer than two temperature readings: no sensor, no evidence of cooling.
    """
    temps = [s for s in samples if s.get("temp_c") is not None]
    if len(temps) < 2:
        return False
    slope = slope_c_per_min(temps)
    if slope is None:
        return False
    return temps[-1]["temp_c"] <= idle_c + within_c and slope < max_slope_c_per_min


class BoardTelemetry:
    """The agent's view of the board's sensors during one sustained run.

    Wraps a 1 Hz :class:`TelemetrySampler` and gives its samples an absolute ``t``
    (CLOCK_MONOTONIC seconds), the clock the worker times its windows on, so the two
    line up. With no sensors at all it still runs and reports ``absent``.
    """

    def __init__(self, sampler: TelemetrySampler, trip_c: float | None):
        self._sampler = sampler
        self.trip_c = trip_c
        self.has_temperature = sampler.has_temperature

    @classmethod
    def open(cls, root, commands: bool = True) -> BoardTelemetry:
        """Discover sensors under ``root`` (the configurable probe root). ``commands=False``
        reads files only, never ``vcgencmd``: beside a latency loop, a process started
        every second would be in its figures."""
        from edgequal.agent.probes.thermal import read_thermal

        sampler = TelemetrySampler(
            root, interval_s=1.0, use_commands=commands, measure_clock=commands
        )
        return cls(sampler, read_thermal(root).get("trip_c"))

    def read_temp_c(self) -> float | None:
        """Read the authoritative temperature now."""
        return self._sampler.sample_once()["temp_c"]

    def latest_temp_c(self) -> float | None:
        """The temperature of the newest 1 Hz sample."""
        samples = self._sampler.samples()
        return samples[-1]["temp_c"] if samples else None

    def slope_c_per_min(self, last_s: float) -> float | None:
        """Temperature slope over the last ``last_s`` seconds of samples (°C/min), None without readings."""
        samples = self._sampler.samples()
        if not samples:
            return None
        return slope_c_per_min([x for x in samples if x["t_s"] >= samples[-1]["t_s"] - last_s])

    def start(self) -> None:
        """Start the 1 Hz sampling thread."""
        self._sampler.start()

    def samples(self) -> list[dict]:
        """Samples so far, each with ``t`` on CLOCK_MONOTONIC."""
        start = self._sampler.start_monotonic or 0.0
        return [{**s, "t": start + s["t_s"]} for s in self._sampler.samples()]

    def stop(self) -> list[dict]:
        """Stop sampling; every sample."""
        self._sampler.stop()
        return self.samples()

    def describe(self) -> str | dict:
        """``absent`` when the board exposes no temperature sensor, else which zones were read."""
        if not self.has_temperature:
            return "absent"
        return {"zones": self._sampler.zone_types}
