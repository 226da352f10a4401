"""Thermal zones and cooling devices from ``/sys/class/thermal``.

Reads every ``thermal_zone*`` (type, temp, trip points) and ``cooling_device*``
(type, cur_state, max_state) under the probe root. Values are millidegrees Celsius
in sysfs and degrees Celsius here.

Zones known to lie are kept but flagged ``unreliable`` and left out of every maximum
and alarm: ``PMIC-Die`` on the Jetson Nano and Xavier NX reads a constant 100 °C
(measurement.md §1.2, [PSUTIL-1873], [BALENA-142]; jetson-stats skips any zone whose
name contains "PMIC"). Zones reading 0 or an implausible value, and zones whose temp
cannot be read (Orin ``cv*`` zones while the accelerators are power-gated) report
``temp_c: None`` with a reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from edgequal.agent.probes.sysfs import natural_index, parse_int, read_text, read_value, under

THERMAL_DIR = "/sys/class/thermal"

# measurement.md §8: skip values <= 0 or > 150 °C; no board here survives 150 °C.
MAX_PLAUSIBLE_C = 150.0

# Trip types that mean "the kernel starts slowing the chip down here".
THROTTLE_TRIP_TYPES = ("passive", "hot")

_TRIP_FILE = re.compile(r"^trip_point_(\d+)_(temp|type|hyst)$")
# Jetson junction zones: "tj-thermal" (T234), "Tj-therm"/"tj" on older BSPs.
_TJ_ZONE = re.compile(r"^tj([-_]|$)", re.IGNORECASE)


def parse_millidegrees(text: str | None) -> float | None:
    """``"54530\\n"`` -> 54.53 (°C); ``None`` for missing, empty or non-numeric text."""
    value = parse_int(text)
    return None if value is None else value / 1000.0


def is_unreliable_zone(zone_type: str | None) -> bool:
    """True for zones known to report a constant, meaningless value (type contains "PMIC")."""
    return zone_type is not None and "PMIC" in zone_type.upper()


def is_junction_zone(zone_type: str | None) -> bool:
    """True for a Jetson junction-temperature zone (``tj-thermal``): the max over on-die sensors."""
    return zone_type is not None and bool(_TJ_ZONE.match(zone_type))


def parse_trip_points(files: Mapping[str, str | None]) -> list[dict]:
    """Trip points from ``{"trip_point_0_temp": "99000", "trip_point_0_type": "passive", ...}``.

    Returns ``[{"index", "temp_c", "type", "hyst_c"}]`` sorted by index; a missing or
    unparsable part is ``None``.
    """
    trips: dict[int, dict] = {}
    for fname, text in files.items():
        m = _TRIP_FILE.match(fname)
        if not m:
            continue
        trip = trips.setdefault(
            int(m.group(1)),
            {"index": int(m.group(1)), "temp_c": None, "type": None, "hyst_c": None},
        )
        kind = m.group(2)
        if kind == "temp":
            trip["temp_c"] = parse_millidegrees(text)
        elif kind == "hyst":
            trip["hyst_c"] = parse_millidegrees(text)
        else:
            trip["type"] = text.strip() if text and text.strip() else None
    return [trips[i] for i in sorted(trips)]


def parse_zone(name: str, files: Mapping[str, str | None]) -> dict:
    """One zone from the text of its files (``None`` = unreadable). Pure.

    Returns ``{"name", "type", "temp_c", "unreliable", "reason", "trips"}``: ``temp_c``
    is ``None`` when the reading is unusable and ``reason`` says why; an unreliable zone
    keeps its reading but ``reason`` explains why it is ignored.
    """
    raw_type = files.get("type")
    zone_type = raw_type.strip() if raw_type and raw_type.strip() else None
    raw_temp = files.get("temp")
    temp_c = parse_millidegrees(raw_temp)
    reason = None
    if raw_temp is None:
        reason = "temp unreadable"
    elif not raw_temp.strip():
        reason = "temp empty"
    elif temp_c is None:
        reason = f"temp not a number: {raw_temp.strip()[:32]!r}"
    elif temp_c == 0:
        temp_c, reason = None, "reads 0 (sensor off or not wired)"
    elif temp_c < 0 or temp_c > MAX_PLAUSIBLE_C:
        reason = f"implausible reading {temp_c:g} °C"
        temp_c = None
    unreliable = is_unreliable_zone(zone_type)
    if unreliable and reason is None:
        reason = "PMIC zones report a constant value; excluded from maxima and alarms"
    return {
        "name": name,
        "type": zone_type,
        "temp_c": temp_c,
        "unreliable": unreliable,
        "reason": reason,
        "trips": parse_trip_points(files),
    }


def parse_cooling_device(name: str, files: Mapping[str, str | None]) -> dict:
    """One cooling device: ``{"name", "type", "cur_state", "max_state"}`` (ints or ``None``). Pure."""
    raw_type = files.get("type")
    return {
        "name": name,
        "type": raw_type.strip() if raw_type and raw_type.strip() else None,
        "cur_state": parse_int(files.get("cur_state")),
        "max_state": parse_int(files.get("max_state")),
    }


def usable_zones(zones: list[dict]) -> list[dict]:
    """Zones with a plausible reading that are not known to lie."""
    return [z for z in zones if not z["unreliable"] and z["temp_c"] is not None]


def trip_lookup(zones: list[dict]) -> dict:
    """Lowest passive/hot trip (``trip_c``) and lowest critical trip (``critical_c``) over reliable zones.

    Returns ``{"trip_c", "trip_zone", "critical_c", "critical_zone"}``; ``None`` where
    no such trip exists (a Raspberry Pi has no passive trip: its firmware throttles).
    """
    best: dict[str, tuple[float, str | None] | None] = {"trip": None, "critical": None}
    for zone in zones:
        if zone["unreliable"]:
            continue
        for trip in zone["trips"]:
            t = trip["temp_c"]
            if t is None or t <= 0 or t > MAX_PLAUSIBLE_C * 2:
                continue
            if trip["type"] in THROTTLE_TRIP_TYPES:
                key = "trip"
            elif trip["type"] == "critical":
                key = "critical"
            else:
                continue
            cur = best[key]
            if cur is None or t < cur[0]:
                best[key] = (t, zone["type"])
    trip, crit = best["trip"], best["critical"]
    return {
        "trip_c": trip[0] if trip else None,
        "trip_zone": trip[1] if trip else None,
        "critical_c": crit[0] if crit else None,
        "critical_zone": crit[1] if crit else None,
    }


def summarize_zones(zones: list[dict]) -> dict:
    """Maximum and authoritative temperature over reliable zones, plus the trip lookup.

    ``authoritative_temp_c`` is the junction zone (``tj-thermal``) when it reads,
    else ``max_temp_c`` (measurement.md §1.2).
    """
    usable = usable_zones(zones)
    hottest = max(usable, key=lambda z: z["temp_c"], default=None)
    junction = next((z for z in usable if is_junction_zone(z["type"])), None)
    auth = junction or hottest
    return {
        "max_temp_c": hottest["temp_c"] if hottest else None,
        "max_zone": hottest["type"] if hottest else None,
        "authoritative_temp_c": auth["temp_c"] if auth else None,
        "authoritative_zone": auth["type"] if auth else None,
        **trip_lookup(zones),
    }


def _read_dir_files(path: Path, names: list[str]) -> dict[str, str | None]:
    return {n: read_text(path / n) for n in names}


def list_entries(root: str | os.PathLike, prefix: str) -> list[Path]:
    """``/sys/class/thermal/<prefix>*`` under root, in natural order; empty when the class is absent."""
    base = under(root, THERMAL_DIR)
    try:
        names = [n for n in os.listdir(base) if n.startswith(prefix)]
    except OSError:
        return []
    return [base / n for n in sorted(names, key=natural_index)]


def read_zone(path: Path) -> dict:
    """Read one ``thermal_zone*`` directory (type, temp, every trip point)."""
    try:
        trip_names = [n for n in os.listdir(path) if _TRIP_FILE.match(n)]
    except OSError:
        trip_names = []
    return parse_zone(path.name, _read_dir_files(path, ["type", "temp", *trip_names]))


def read_thermal(root: str | os.PathLike) -> dict:
    """Every thermal zone and cooling device under ``root``, with the summary of :func:`summarize_zones`.

    Returns ``{"available", "reason", "zones", "cooling_devices", "max_temp_c", "max_zone",
    "authoritative_temp_c", "authoritative_zone", "trip_c", "trip_zone", "critical_c",
    "critical_zone"}``.
    """
    zones = [read_zone(p) for p in list_entries(root, "thermal_zone")]
    cooling = [
        parse_cooling_device(p.name, _read_dir_files(p, ["type", "cur_state", "max_state"]))
        for p in list_entries(root, "cooling_device")
    ]
    reason = None
    if not zones:
        reason = f"no thermal zones under {under(root, THERMAL_DIR)}"
    elif not usable_zones(zones):
        reason = "no thermal zone has a usable reading"
    return {
        "available": bool(usable_zones(zones)),
        "reason": reason,
        "zones": zones,
        "cooling_devices": cooling,
        **summarize_zones(zones),
    }


def read_zone_temp_c(path: Path) -> float | None:
    """The current temperature of one zone directory, or ``None`` when unusable. For fast sampling."""
    temp_c = parse_millidegrees(read_value(path / "temp"))
    if temp_c is None or temp_c <= 0 or temp_c > MAX_PLAUSIBLE_C:
        return None
    return temp_c
