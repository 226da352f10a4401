"""CPU frequency policies from ``/sys/devices/system/cpu/cpufreq/policy*``.

Pitfall (measurement.md §1.1, [RPI-OC], [K-CPUFREQ]): ``scaling_cur_freq`` is the
frequency the kernel last *requested*. On a Raspberry Pi the firmware throttles
underneath it, so cpufreq keeps showing the full clock while the cores run slower;
``vcgencmd measure_clock arm`` (see :mod:`raspberry_pi`) gives the real one.
``cpuinfo_cur_freq`` is read from hardware where the driver supports it (and is
often readable by root only); ``cur_khz`` prefers it and ``cur_source`` says which
one was used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from edgequal.agent.probes.sysfs import (
    natural_index,
    parse_cpu_list,
    parse_int,
    read_text,
    read_value,
    under,
)

CPU_DIR = "/sys/devices/system/cpu"
CPUFREQ_DIR = "/sys/devices/system/cpu/cpufreq"

_POLICY_FILES = (
    "scaling_cur_freq",
    "cpuinfo_cur_freq",
    "scaling_min_freq",
    "scaling_max_freq",
    "cpuinfo_min_freq",
    "cpuinfo_max_freq",
    "scaling_governor",
    "related_cpus",
    "affected_cpus",
)


def parse_policy(name: str, files: Mapping[str, str | None]) -> dict:
    """One policy from the text of its files (``None`` = unreadable). Pure.

    Returns ``{"name", "cur_khz", "cur_source", "scaling_cur_khz", "cpuinfo_cur_khz",
    "min_khz", "max_khz", "cpuinfo_min_khz", "cpuinfo_max_khz", "governor",
    "related_cpus", "affected_cpus"}``; missing values are ``None``.
    """
    scaling_cur = parse_int(files.get("scaling_cur_freq"))
    cpuinfo_cur = parse_int(files.get("cpuinfo_cur_freq"))
    if cpuinfo_cur is not None:
        cur, source = cpuinfo_cur, "cpuinfo_cur_freq"
    elif scaling_cur is not None:
        cur, source = scaling_cur, "scaling_cur_freq (requested)"
    else:
        cur, source = None, None
    governor = files.get("scaling_governor")
    return {
        "name": name,
        "cur_khz": cur,
        "cur_source": source,
        "scaling_cur_khz": scaling_cur,
        "cpuinfo_cur_khz": cpuinfo_cur,
        "min_khz": parse_int(files.get("scaling_min_freq")),
        "max_khz": parse_int(files.get("scaling_max_freq")),
        "cpuinfo_min_khz": parse_int(files.get("cpuinfo_min_freq")),
        "cpuinfo_max_khz": parse_int(files.get("cpuinfo_max_freq")),
        "governor": governor.strip() if governor and governor.strip() else None,
        "related_cpus": parse_cpu_list(files.get("related_cpus")),
        "affected_cpus": parse_cpu_list(files.get("affected_cpus")),
    }


def policy_dirs(root: str | os.PathLike) -> list[Path]:
    """The ``policy*`` directories under root, in natural order."""
    base = under(root, CPUFREQ_DIR)
    try:
        names = [n for n in os.listdir(base) if n.startswith("policy")]
    except OSError:
        return []
    return [base / n for n in sorted(names, key=natural_index)]


def read_policy(path: Path) -> dict:
    """Read one policy directory."""
    return parse_policy(path.name, {n: read_text(path / n) for n in _POLICY_FILES})


def read_cpufreq(root: str | os.PathLike) -> dict:
    """Every cpufreq policy plus the online CPU list.

    Returns ``{"available", "reason", "online", "online_cpus", "present_cpus",
    "policies": {"policy0": {...}}}``.
    """
    online = read_value(under(root, f"{CPU_DIR}/online"))
    policies = {p.name: read_policy(p) for p in policy_dirs(root)}
    return {
        "available": bool(policies),
        "reason": None if policies else f"no cpufreq policies under {under(root, CPUFREQ_DIR)}",
        "online": online,
        "online_cpus": parse_cpu_list(online),
        "present_cpus": parse_cpu_list(read_value(under(root, f"{CPU_DIR}/present"))),
        "policies": policies,
    }


def governors(cpufreq: Mapping) -> dict[str, str | None]:
    """``{"policy0": "ondemand", ...}`` from a :func:`read_cpufreq` result."""
    return {name: p["governor"] for name, p in cpufreq.get("policies", {}).items()}
