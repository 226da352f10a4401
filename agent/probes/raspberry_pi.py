"""Raspberry Pi firmware state: throttle flags, the real ARM clock, the SoC temperature.

``vcgencmd`` (found on PATH) asks the VideoCore firmware directly. Its
``measure_clock arm`` is the clock the cores really run at; cpufreq shows only the
requested one and misses firmware throttling (measurement.md §1.1, [RPI-OC]).

When vcgencmd is absent (e.g. Ubuntu without ``libraspberrypi-bin``) the probe falls
back to sysfs: the firmware driver's ``get_throttled`` attribute where it exists,
``thermal_zone0`` for the temperature, and cpufreq's requested clock, marked as such.
"""

from __future__ import annotations

import os
import re
import shutil

from edgequal.agent.probes.sysfs import parse_int, read_value, run_command, under
from edgequal.agent.probes.thermal import THERMAL_DIR, read_zone_temp_c

VCGENCMD = "vcgencmd"
SYSFS_THROTTLED = "/sys/devices/platform/soc/soc:firmware/get_throttled"
DEVICE_TREE_MODEL = "/proc/device-tree/model"

# get_throttled bit layout [RPI-VC]: bits 0-3 are "now", bits 16-19 the same
# conditions "has occurred since boot" (sticky).
THROTTLE_FLAGS = ("under_voltage", "freq_capped", "throttled", "soft_temp_limit")
SINCE_BOOT_SHIFT = 16

_THROTTLED = re.compile(r"^\s*(?:throttled=)?(?:0x)?([0-9a-fA-F]+)\s*$")
_CLOCK = re.compile(r"frequency\(\d+\)\s*=\s*(\d+)")
_TEMP = re.compile(r"temp=\s*(-?\d+(?:\.\d+)?)\s*'?C")


def parse_throttled(text: str) -> dict:
    """Decode ``vcgencmd get_throttled`` (``"throttled=0x50005"``) or the sysfs attribute (``"50005"``).

    Returns ``{"raw": int, "hex": "0x50005", "now": {flag: bool}, "since_boot": {flag: bool}}``
    with flags ``under_voltage``, ``freq_capped``, ``throttled``, ``soft_temp_limit``.
    Raises ValueError on text that is not a hex bit field.
    """
    m = _THROTTLED.match(text.strip())
    if not m:
        raise ValueError(f"not a get_throttled value: {text.strip()[:40]!r}")
    raw = int(m.group(1), 16)
    return {
        "raw": raw,
        "hex": hex(raw),
        "now": {flag: bool(raw >> bit & 1) for bit, flag in enumerate(THROTTLE_FLAGS)},
        "since_boot": {
            flag: bool(raw >> (bit + SINCE_BOOT_SHIFT) & 1)
            for bit, flag in enumerate(THROTTLE_FLAGS)
        },
    }


def parse_measure_clock(text: str) -> int:
    """``vcgencmd measure_clock arm`` (``"frequency(48)=1500398464"``) -> Hz. ValueError otherwise."""
    m = _CLOCK.search(text)
    if not m:
        raise ValueError(f"not a measure_clock reply: {text.strip()[:40]!r}")
    return int(m.group(1))


def parse_measure_temp(text: str) -> float:
    """``vcgencmd measure_temp`` (``"temp=54.2'C"``) -> °C. ValueError otherwise."""
    m = _TEMP.search(text)
    if not m:
        raise ValueError(f"not a measure_temp reply: {text.strip()[:40]!r}")
    return float(m.group(1))


def _vcgencmd(args: list[str], parser, timeout_s: float):
    text, reason = run_command([VCGENCMD, *args], timeout_s=timeout_s)
    if text is None:
        return None, reason
    try:
        return parser(text), None
    except ValueError as e:
        return None, str(e)


def read_throttled(root: str | os.PathLike, timeout_s: float = 2.0) -> tuple[dict | None, str]:
    """``get_throttled`` decoded, from vcgencmd or the sysfs attribute.

    Returns ``(flags, source)`` where source is ``"vcgencmd"``, ``"sysfs"``, or the
    reason both were unavailable (flags ``None``).
    """
    flags, reason = _vcgencmd(["get_throttled"], parse_throttled, timeout_s)
    if flags is not None:
        return flags, "vcgencmd"
    text = read_value(under(root, SYSFS_THROTTLED))
    if text is not None:
        try:
            return parse_throttled(text), "sysfs"
        except ValueError as e:
            return None, f"{reason}; {SYSFS_THROTTLED}: {e}"
    return None, f"{reason}; no {SYSFS_THROTTLED}"


def is_raspberry_pi(root: str | os.PathLike) -> bool:
    """True when the device-tree model names a Raspberry Pi, or its firmware interfaces exist."""
    model = read_value(under(root, DEVICE_TREE_MODEL))
    if model and model.startswith("Raspberry Pi"):
        return True
    return under(root, SYSFS_THROTTLED).exists()


def detected(root: str | os.PathLike) -> bool:
    """Whether the board under ``root`` is a Raspberry Pi: its device-tree model or firmware
    interface says so, or ``vcgencmd`` is on PATH (the family's detection)."""
    return is_raspberry_pi(root) or shutil.which(VCGENCMD) is not None


def read_raspberry_pi(root: str | os.PathLike, timeout_s: float = 2.0) -> dict:
    """Throttle flags, ARM clock and SoC temperature of a Raspberry Pi.

    Returns ``{"available", "reason", "throttled", "throttled_source", "arm_clock_hz",
    "arm_clock_source", "temp_c", "temp_source"}``. ``arm_clock_source`` is
    ``"vcgencmd"`` (measured) or ``"cpufreq (requested only)"``; every value is
    ``None`` with a ``*_source`` reason when it cannot be read.
    """
    if not detected(root):
        return {
            "available": False,
            "reason": "not a Raspberry Pi (device-tree model, firmware, vcgencmd)",
        }

    throttled, throttled_source = read_throttled(root, timeout_s)

    clock_hz, clock_reason = _vcgencmd(["measure_clock", "arm"], parse_measure_clock, timeout_s)
    clock_source = "vcgencmd"
    if clock_hz is None:
        khz = parse_int(
            read_value(under(root, "/sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq"))
        )
        if khz is not None:
            clock_hz, clock_source = khz * 1000, "cpufreq (requested only)"
        else:
            clock_source = f"{clock_reason}; no cpufreq policy0"

    temp_c, temp_reason = _vcgencmd(["measure_temp"], parse_measure_temp, timeout_s)
    temp_source = "vcgencmd"
    if temp_c is None:
        temp_c = read_zone_temp_c(under(root, f"{THERMAL_DIR}/thermal_zone0"))
        temp_source = "thermal_zone0" if temp_c is not None else f"{temp_reason}; no thermal_zone0"

    return {
        "available": True,
        "reason": None,
        "throttled": throttled,
        "throttled_source": throttled_source,
        "arm_clock_hz": clock_hz,
        "arm_clock_source": clock_source,
        "temp_c": temp_c,
        "temp_source": temp_source,
    }


def fingerprint_section(
    root: str | os.PathLike, reading: dict | None, timeout_s: float = 2.0
) -> tuple[dict, dict] | None:
    """The Pi's section of the fingerprint (``get_throttled`` and its source, the fields
    ``contract/board_families.py`` declares) and what of it is absent, or None when the
    board is not a Pi. ``reading`` is :func:`read_raspberry_pi`'s when taken already;
    otherwise only the throttle flags are read."""
    if reading is None:
        if not detected(root):
            return None
        flags, src = read_throttled(root, timeout_s)
        reading = {"available": True, "throttled": flags, "throttled_source": src}
    if not reading.get("available"):
        return None
    flags, src = reading["throttled"], reading["throttled_source"]
    section = {"get_throttled": flags, "get_throttled_source": src if flags is not None else None}
    return section, ({"get_throttled": src} if flags is None else {})


class _PiTelemetry:
    """The Pi's part of one telemetry sample: the firmware's throttle flags (``vcgencmd
    get_throttled``, else the sysfs attribute) and the measured ARM clock (``vcgencmd
    measure_clock arm``), each None when unreadable."""

    def __init__(self, root, use_commands: bool, measure_clock: bool, timeout_s: float):
        self.vcgencmd = use_commands and shutil.which(VCGENCMD) is not None
        self.measure_clock = self.vcgencmd and measure_clock
        self.timeout_s = timeout_s
        sysfs = under(root, SYSFS_THROTTLED)
        self.sysfs = sysfs if (self.vcgencmd or sysfs.exists()) else None

    def available(self) -> bool:
        return self.vcgencmd or self.sysfs is not None

    def throttled(self) -> dict | None:
        if self.vcgencmd:
            text, _ = run_command([VCGENCMD, "get_throttled"], self.timeout_s)
            if text is not None:
                try:
                    return parse_throttled(text)
                except ValueError:
                    pass
        if self.sysfs is not None:
            text = read_value(self.sysfs)
            if text is not None:
                try:
                    return parse_throttled(text)
                except ValueError:
                    return None
        return None

    def arm_clock_khz(self) -> int | None:
        if not self.measure_clock:
            return None
        text, _ = run_command([VCGENCMD, "measure_clock", "arm"], self.timeout_s)
        if text is None:
            return None
        try:
            return parse_measure_clock(text) // 1000
        except ValueError:
            return None

    def __call__(self) -> dict:
        return {"arm_clock_khz": self.arm_clock_khz(), "throttled": self.throttled()}


def telemetry_reader(
    root: str | os.PathLike,
    use_commands: bool = True,
    measure_clock: bool = True,
    timeout_s: float = 1.0,
):
    """The Pi's telemetry hook (``probes/registry.py``): a callable returning the fields
    ``contract/board_families.py`` declares for every sample (``arm_clock_khz``,
    ``throttled``), or None when neither ``vcgencmd`` nor the sysfs attribute is there.
    ``use_commands=False`` runs no ``vcgencmd`` (files only)."""
    reader = _PiTelemetry(root, use_commands, measure_clock, timeout_s)
    return reader if reader.available() else None


_PMIC_LINE = re.compile(
    r"^\s*(?P<rail>\S+)_(?P<kind>[AV])\s+(?:current|volt)\(\d+\)=(?P<value>-?[\d.]+)[AV]\s*$"
)


def parse_pmic_read_adc(text: str) -> dict[str, float]:
    """``vcgencmd pmic_read_adc`` -> watts per rail that reports both current and voltage.

    Rails with voltage only (EXT5V, BATT) have no current and so no power: left out.
    ValueError when no line has the reply's shape.
    """
    amps: dict[str, float] = {}
    volts: dict[str, float] = {}
    for line in text.splitlines():
        m = _PMIC_LINE.match(line)
        if not m:
            continue
        (amps if m["kind"] == "A" else volts)[m["rail"]] = float(m["value"])
    if not amps and not volts:
        raise ValueError(f"not a pmic_read_adc reply: {text.strip()[:40]!r}")
    return {rail: round(amps[rail] * volts[rail], 6) for rail in amps if rail in volts}


def is_pi5(root: str | os.PathLike) -> bool:
    """Whether the device tree names a Raspberry Pi 5 (the only Pi whose PMIC has an ADC)."""
    model = read_value(under(root, DEVICE_TREE_MODEL)) or ""
    return model.startswith("Raspberry Pi 5")


def _pmic_watts() -> dict[str, float] | None:
    """Watts per PMIC rail now (``vcgencmd pmic_read_adc``), None when it does not answer."""
    text, _ = run_command([VCGENCMD, "pmic_read_adc"])
    if text is None:
        return None
    try:
        return parse_pmic_read_adc(text) or None
    except ValueError:
        return None


def power_reader(root: str | os.PathLike):
    """The Pi's power hook (``probes/registry.py``, read by ``probes/power.py``): on a
    Raspberry Pi 5 whose ``vcgencmd pmic_read_adc`` answers, a callable giving watts per
    PMIC rail; None on other boards."""
    if not is_pi5(root) or _pmic_watts() is None:
        return None
    return _pmic_watts
