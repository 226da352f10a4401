"""The board fingerprint recorded before every run (DESIGN.md, measurement.md §6.0).

Board model, SoC, kernel, OS, boot id, CPU count, memory, CPU model and kernel-selecting
flags, governors, and the Pi or
Jetson state when the board is one. Every file is read under the probe root; what
describes the running interpreter (architecture, Python version) comes from the
process itself. Cheap: a handful of small reads plus, on a Pi or Jetson, the board
commands.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

from edgequal.agent.config import probe_root
from edgequal.agent.probes import cpufreq as cpufreq_probe
from edgequal.agent.probes import cpuinfo as cpuinfo_probe
from edgequal.agent.probes.registry import board_probes
from edgequal.agent.probes.sysfs import parse_cpu_list, read_text, read_value, under

DT_MODEL = "/proc/device-tree/model"
DT_COMPATIBLE = "/proc/device-tree/compatible"
DMI_PRODUCT = "/sys/class/dmi/id/product_name"
DMI_VENDOR = "/sys/class/dmi/id/sys_vendor"
OSRELEASE = "/proc/sys/kernel/osrelease"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
OS_RELEASE = "/etc/os-release"
MEMINFO = "/proc/meminfo"


def parse_compatible(raw: str | None) -> list[str]:
    """Device-tree ``compatible`` (NUL-separated, most specific first) as a list."""
    if not raw:
        return []
    return [s.strip() for s in raw.split("\x00") if s.strip()]


def parse_os_release(text: str | None) -> dict[str, str]:
    """``/etc/os-release`` as a dict (quotes removed)."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def parse_meminfo_kb(text: str | None, key: str = "MemTotal") -> int | None:
    """One ``/proc/meminfo`` field in kB (``"MemTotal:  3884360 kB"`` -> 3884360)."""
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == key:
            parts = rest.split()
            if parts and parts[0].isdigit():
                return int(parts[0])
    return None


def _is_host_root(root: Path) -> bool:
    return root.resolve() == Path("/")


def fingerprint(
    root: str | os.PathLike | None = None,
    *,
    cpufreq: dict | None = None,
    boards: Mapping[str, dict] | None = None,
    timeout_s: float = 2.0,
) -> dict:
    """The fingerprint of the board under ``root`` (default: ``probe_root()``).

    Keys: ``board_model``, ``board_model_source`` (``device-tree`` or ``dmi``), ``soc``,
    ``compatible``, ``kernel``, ``os_release``, ``boot_id``, ``cpu_count``,
    ``memory_total_kb``, ``memory_mb``, ``architecture``, ``python``, ``cpu_model``,
    ``cpu_isa`` and ``cpu_flags`` (the kernel-selecting flags of ``/proc/cpuinfo``,
    ``probes/cpuinfo.py``), ``cpu_governors``,
    ``online_cpus``, and a section per board family the board is one of
    (``contract/board_families.py``: ``raspberry_pi`` with ``get_throttled``, ``jetson``
    with ``nvpmodel``, ``jetson_clocks``, ``l4t``). A value that cannot be read is ``None``
    and ``absent[key]`` says why (``absent["jetson.l4t"]`` for a section's); nothing is
    guessed. ``cpufreq`` and ``boards`` (by family name) may pass readings already taken
    by those probes so that board commands run once.
    """
    root = probe_root(root)
    host_root = _is_host_root(root)
    absent: dict[str, str] = {}
    fp: dict = {}

    model = read_value(under(root, DT_MODEL))
    source = "device-tree" if model else None
    if model is None:
        model = read_value(under(root, DMI_PRODUCT))
        source = "dmi" if model else None
        vendor = read_value(under(root, DMI_VENDOR))
        if model and vendor and not model.startswith(vendor):
            model = f"{vendor} {model}"
    if model is None:
        absent["board_model"] = f"no {DT_MODEL} and no {DMI_PRODUCT}"
    fp["board_model"] = model
    fp["board_model_source"] = source

    compatible = parse_compatible(read_text(under(root, DT_COMPATIBLE)))
    fp["compatible"] = compatible
    # By device-tree convention the SoC is the last, least specific entry ("brcm,bcm2712").
    fp["soc"] = compatible[-1] if compatible else None
    if not compatible:
        absent["soc"] = f"no {DT_COMPATIBLE}"

    if host_root:
        fp["kernel"] = os.uname().release
    else:
        fp["kernel"] = read_value(under(root, OSRELEASE))
        if fp["kernel"] is None:
            absent["kernel"] = f"no {OSRELEASE}"

    osr = parse_os_release(read_text(under(root, OS_RELEASE)))
    fp["os_release"] = osr.get("PRETTY_NAME")
    if fp["os_release"] is None:
        absent["os_release"] = f"no PRETTY_NAME in {OS_RELEASE}"

    fp["boot_id"] = read_value(under(root, BOOT_ID))
    if fp["boot_id"] is None:
        absent["boot_id"] = f"no {BOOT_ID}"

    present = parse_cpu_list(read_value(under(root, "/sys/devices/system/cpu/present")))
    if present:
        fp["cpu_count"] = len(present)
    elif host_root:
        fp["cpu_count"] = os.cpu_count()
    else:
        fp["cpu_count"] = None
        absent["cpu_count"] = "no /sys/devices/system/cpu/present"

    mem_kb = parse_meminfo_kb(read_text(under(root, MEMINFO)))
    fp["memory_total_kb"] = mem_kb
    fp["memory_mb"] = mem_kb // 1024 if mem_kb is not None else None
    if mem_kb is None:
        absent["memory_mb"] = f"no MemTotal in {MEMINFO}"

    fp["architecture"] = platform.machine()
    fp["python"] = platform.python_version()

    cpu = cpuinfo_probe.read_cpuinfo(root)
    fp["cpu_model"] = cpu["model_name"]
    fp["cpu_isa"] = cpu["isa"]
    fp["cpu_flags"] = cpu["flags"]
    if cpu["flags"] is None:
        absent["cpu_flags"] = cpu["reason"]

    freq = cpufreq if cpufreq is not None else cpufreq_probe.read_cpufreq(root)
    fp["cpu_governors"] = cpufreq_probe.governors(freq)
    fp["online_cpus"] = freq.get("online")
    if not freq.get("policies"):
        absent["cpu_governors"] = freq.get("reason") or "no cpufreq policies"

    for probe in board_probes():
        reading = (boards or {}).get(probe.name)
        part = probe.fingerprint_section(root, reading, timeout_s)
        if part is not None:
            fp[probe.name], missing = part
            absent.update({f"{probe.name}.{key}": why for key, why in missing.items()})

    # The board's own passive trip point (a device tree or firmware sets it): a lower one
    # throttles sooner, so a change of it explains a slower night (host/lab/changes.py).
    from .thermal import read_thermal

    trip_c = read_thermal(root).get("trip_c")
    if trip_c is not None:
        fp["thermal_trip_c"] = trip_c

    fp["absent"] = absent
    return fp
