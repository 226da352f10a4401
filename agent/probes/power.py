"""Power rails: what the board's own monitors say it draws, in watts. Absent is absent.

Three sources, each a reader over a root path (or a board command) and a pure parser:

- hwmon (``/sys/class/hwmon/hwmon*``, and the Jetson INA3221's own
  ``/sys/bus/i2c/drivers/ina3221*/*/hwmon/hwmon*``): ``power<K>_input`` in µW, or
  ``curr<K>_input`` (mA) times ``in<K>_input`` (mV) of the same channel. INA3221
  channels count only when they carry a label (``in<K>_label``, e.g. ``VDD_IN``): an
  unlabelled channel has nothing wired, and channel 4 (``curr4``) is the chip's sum.
- Jetson iio (L4T 32, ``/sys/bus/i2c/drivers/ina3221x/*/iio:device*``):
  ``rail_name_<K>`` and ``in_power<K>_input`` in mW.
- Raspberry Pi 5 PMIC: ``vcgencmd pmic_read_adc`` lists 12 rails' current
  (``NAME_A current(N)=0.73A``) and voltage (``NAME_V volt(N)=0.88V``), EXT5V and BATT
  voltage only; watts are current times voltage per rail. The board family brings it:
  ``raspberry_pi.power_reader`` (its ``parse_pmic_read_adc``), found through
  ``registry.py`` like any family's hook. Spawning vcgencmd is not free (field-2026.md): it is read every
  ``PMIC_INTERVAL_S``, not every sample, and its cost is measured.

The board total is the input rail where one is named (``VDD_IN``, ``POM_5V_IN``: what
jetson-stats takes, and it excludes the carrier board), else the sum of the rails
(Pi 5: board rails, wireless, HDMI and IO included, not the SoC alone). Nothing is
estimated: a board without a readable rail reports ``None`` with the reason.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .sysfs import read_value, under

HWMON_DIR = "/sys/class/hwmon"
INA3221_DRIVERS = "/sys/bus/i2c/drivers"
# Rails that measure the whole module's input: the total when present.
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")
# vcgencmd is a process spawn per read: at most every this many seconds.
PMIC_INTERVAL_S = 5.0

_NUMBERED = re.compile(r"^(power|curr|in)(\d+)_input$")


@dataclass(frozen=True)
class SysfsRail:
    """One rail read from files: watts = ``power`` × scale, or ``current`` × ``voltage`` × scale."""

    name: str
    source: str  # hwmon | ina3221 | iio
    power: Path | None = None
    current: Path | None = None
    voltage: Path | None = None
    scale: float = 1e-6  # µW -> W; mA × mV -> W is also 1e-6; iio mW -> W is 1e-3

    def read_w(self) -> float | None:
        """Watts now, or None when a file is unreadable."""
        if self.power is not None:
            v = _number(read_value(self.power))
            return None if v is None else v * self.scale
        a, v = _number(read_value(self.current)), _number(read_value(self.voltage))
        return None if a is None or v is None else a * v * self.scale


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def hwmon_rails(directory: Path) -> list[SysfsRail]:
    """The rails of one hwmon device directory (see the module docstring for the rules)."""
    chip = read_value(directory / "name") or directory.name
    ina3221 = chip.startswith("ina3221")
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    channels: dict[str, set[int]] = {"power": set(), "curr": set(), "in": set()}
    for n in names:
        m = _NUMBERED.match(n)
        if m:
            channels[m[1]].add(int(m[2]))

    def label(*candidates: str) -> str | None:
        for c in candidates:
            value = read_value(directory / c)
            if value:
                return value
        return None

    rails = []
    for k in sorted(channels["power"]):
        name = label(f"power{k}_label") or f"{chip}/power{k}"
        rails.append(SysfsRail(name, "hwmon", power=directory / f"power{k}_input"))
    for k in sorted((channels["curr"] & channels["in"]) - channels["power"]):
        name = label(f"in{k}_label", f"curr{k}_label")
        if ina3221 and (name is None or read_value(directory / f"in{k}_enable") == "0"):
            continue  # nothing wired to the channel, or the summation channel
        rails.append(
            SysfsRail(
                name or f"{chip}/curr{k}",
                "ina3221" if ina3221 else "hwmon",
                current=directory / f"curr{k}_input",
                voltage=directory / f"in{k}_input",
            )
        )
    return rails


def iio_rails(directory: Path) -> list[SysfsRail]:
    """L4T 32's INA3221 iio device: ``rail_name_<K>`` with ``in_power<K>_input`` (mW)."""
    rails = []
    k = 0
    while (directory / f"rail_name_{k}").exists():
        name = read_value(directory / f"rail_name_{k}") or f"rail{k}"
        rails.append(SysfsRail(name, "iio", power=directory / f"in_power{k}_input", scale=1e-3))
        k += 1
    return rails


def find_sysfs_rails(root: str | os.PathLike) -> list[SysfsRail]:
    """Every readable rail under ``root``: hwmon devices, INA3221 hwmon and iio; each device once."""
    dirs: list[Path] = []
    base = under(root, HWMON_DIR)
    if base.is_dir():
        dirs += sorted(base.iterdir())
    drivers = under(root, INA3221_DRIVERS)
    iio: list[Path] = []
    if drivers.is_dir():
        for driver in sorted(drivers.glob("ina3221*")):
            for dev in sorted(driver.glob("*-*")):
                dirs += sorted((dev / "hwmon").glob("hwmon*"))
                iio += sorted(dev.glob("iio:device*"))
    seen: set[str] = set()
    rails: list[SysfsRail] = []
    for d in dirs:
        real = os.path.realpath(d)
        if real in seen:
            continue
        seen.add(real)
        rails += [r for r in hwmon_rails(d) if r.read_w() is not None]
    for d in iio:
        rails += [r for r in iio_rails(d) if r.read_w() is not None]
    return rails


def board_total_w(rails_w: dict[str, float | None]) -> tuple[float | None, str | None]:
    """``(watts, how)``: the input rail when one is named, else the sum of every rail read."""
    for name in INPUT_RAILS:
        if rails_w.get(name) is not None:
            return rails_w[name], name
    values = [v for v in rails_w.values() if v is not None]
    if not values:
        return None, None
    return sum(values), "sum of rails" if len(values) > 1 else next(iter(rails_w))


class PowerProbe:
    """The board's readable rails, read together: :meth:`read` gives watts per rail and the total.

    ``pmic_reader`` returns watts per rail of the board's power-management IC (or None
    when a read fails): a board family's ``power_reader`` hook, found through
    ``probes/registry.py`` (the Raspberry Pi 5's ``vcgencmd pmic_read_adc``). A command per
    read is not free: it is asked at most every ``PMIC_INTERVAL_S``, and the last reply is
    reused between asks.
    """

    def __init__(
        self,
        rails: list[SysfsRail],
        pmic_reader: Callable[[], dict[str, float] | None] | None = None,
        absent_reason: str | None = None,
    ):
        self.rails = rails
        self.pmic_reader = pmic_reader
        self.absent_reason = absent_reason
        self._pmic_last: dict[str, float] = {}
        self._pmic_at: float | None = None
        self.read_cost_s = 0.0
        self.reads = 0
        self.pmic_reads = 0

    @classmethod
    def open(cls, root: str | os.PathLike = "/") -> PowerProbe:
        """Find the rails under ``root``, and a board family's power-management IC where its
        probe's ``power_reader`` finds one answering (a Pi 5 with vcgencmd on PATH)."""
        from .registry import board_probes

        rails = find_sysfs_rails(root)
        readers = (p.power_reader(root) for p in board_probes() if p.power_reader is not None)
        pmic = next((reader for reader in readers if reader is not None), None)
        reason = None
        if not rails and pmic is None:
            reason = "no readable power rail (no hwmon power or current+voltage channel"
            reason += ", no INA3221, not a Raspberry Pi 5 with vcgencmd pmic_read_adc)"
        return cls(rails, pmic, reason)

    @property
    def present(self) -> bool:
        """Whether any rail can be read."""
        return bool(self.rails) or self.pmic_reader is not None

    def read(self, now: float | None = None) -> dict:
        """``{rails_w, total_w, total_from}`` now; ``now`` (monotonic s) paces the PMIC asks."""
        t0 = time.perf_counter()
        now = time.monotonic() if now is None else now
        rails_w: dict[str, float | None] = {r.name: r.read_w() for r in self.rails}
        if self.pmic_reader is not None:
            if self._pmic_at is None or now - self._pmic_at >= PMIC_INTERVAL_S:
                parsed = self.pmic_reader()
                self.pmic_reads += 1
                self._pmic_at = now
                if parsed is not None:
                    self._pmic_last = parsed
            rails_w.update({f"pmic/{k}": v for k, v in self._pmic_last.items()})
        total, how = board_total_w(rails_w)
        self.read_cost_s += time.perf_counter() - t0
        self.reads += 1
        return {
            "rails_w": {k: round(v, 6) if v is not None else None for k, v in rails_w.items()},
            "total_w": round(total, 6) if total is not None else None,
            "total_from": how,
        }

    def describe(self) -> dict:
        """What was found: rails and their source, or why none; the reads' own cost."""
        if not self.present:
            return {"present": False, "reason": self.absent_reason}
        sources = sorted({r.source for r in self.rails} | ({"pmic"} if self.pmic_reader else set()))
        return {
            "present": True,
            "sources": sources,
            "rails": [r.name for r in self.rails]
            + (["pmic (vcgencmd)"] if self.pmic_reader else []),
            "reads": self.reads,
            "pmic_reads": self.pmic_reads,
            "read_cost_ms_mean": round(self.read_cost_s / self.reads * 1e3, 3)
            if self.reads
            else None,
        }


def read_power(root: str | os.PathLike = "/") -> dict:
    """One reading of every rail under ``root`` with what was found (``edgequal-agent info``):
    :meth:`PowerProbe.describe` plus, where a rail reads, ``rails_w``, ``total_w``, ``total_from``."""
    probe = PowerProbe.open(root)
    if not probe.present:
        return probe.describe()
    reading = probe.read()
    return {**probe.describe(), **reading}


class PowerSampler:
    """Reads a :class:`PowerProbe` every ``interval_s`` on a daemon thread (the agent, never the worker).

    A sample is ``{"t": monotonic s, "total_w", "rails_w"}``.
    """

    def __init__(self, probe: PowerProbe, interval_s: float = 1.0):
        self.probe = probe
        self.interval_s = interval_s
        self._samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> dict:
        """One reading, stamped with CLOCK_MONOTONIC, kept."""
        now = time.monotonic()
        sample = {"t": now, **self.probe.read(now)}
        self._samples.append(sample)
        return sample

    def _run(self) -> None:
        while True:
            self.sample_once()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> None:
        """Begin sampling (the first reading is taken at once)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="power", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict]:
        """Stop, take a last reading (so the last window is bracketed), and return every sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample_once()
        return list(self._samples)
