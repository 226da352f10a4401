"""NVIDIA Jetson power mode, clocks, GPU frequency and L4T release.

``nvpmodel -q`` and ``jetson_clocks --show`` are found on PATH (``jetson_clocks``
usually needs root; without it the reading is absent with the reason). Mode IDs
differ per module, so the mode is recorded by name *and* id (measurement.md §1.2).
The GPU clock comes from devfreq in sysfs, at either path the Orin nvpmodel confs use
([NVP-P3701]); the L4T release from ``/etc/nv_tegra_release``. This probe only reads:
it never changes the power mode or clocks.
"""

from __future__ import annotations

import os
import re
import shutil

from edgequal.agent.probes.sysfs import (
    natural_index,
    parse_int,
    read_text,
    read_value,
    run_command,
    under,
)
from edgequal.contract.board_families import board_family

L4T_RELEASE = "/etc/nv_tegra_release"
DEVICE_TREE_MODEL = "/proc/device-tree/model"

# Newer kernels first, then the older ga10b path; both appear in the Orin confs [NVP-P3701].
GPU_DEVFREQ_DIRS = (
    "/sys/devices/platform/17000000.gpu/devfreq_dev",
    "/sys/devices/17000000.ga10b/devfreq/17000000.ga10b",
)
DEVFREQ_CLASS = "/sys/class/devfreq"
# devfreq device names of Jetson GPUs (Orin ga10b, Xavier gv11b, TX2 gp10b, Nano gm20b).
_GPU_DEVFREQ_NAME = re.compile(r"gpu|ga10b|gv11b|gp10b|gm20b", re.IGNORECASE)

_POWER_MODE = re.compile(r"NV Power Mode:\s*(.+?)\s*$")
_FAN_MODE = re.compile(r"NV Fan Mode:\s*(.+?)\s*$")
_CPU_LINE = re.compile(r"^cpu(\d+):\s*(.*)$")
_UNIT_LINE = re.compile(r"^(GPU|EMC)\s+(.*)$")
_KV = re.compile(r"(\w+)=(\S+)")
_L4T = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)(.*)")


def parse_nvpmodel(text: str) -> dict:
    """``nvpmodel -q`` -> ``{"mode": "25W", "id": 1, "fan_mode": str | None}``.

    The reply is a ``NV Power Mode: NAME`` line followed by the mode id on its own
    line, possibly after ``NVPM WARN`` lines. Raises ValueError without a mode line.
    """
    lines = [ln.strip() for ln in text.splitlines()]
    mode = mode_id = fan = None
    for i, line in enumerate(lines):
        m = _FAN_MODE.search(line)
        if m:
            fan = m.group(1)
            continue
        m = _POWER_MODE.search(line)
        if m:
            mode = m.group(1)
            mode_id = next((int(x) for x in lines[i + 1 :] if x.isdigit()), None)
    if mode is None:
        raise ValueError("no 'NV Power Mode' line in nvpmodel output")
    return {"mode": mode, "id": mode_id, "fan_mode": fan}


def _int_or_none(value: str | None) -> int | None:
    return parse_int(value) if value is not None else None


def parse_jetson_clocks(text: str) -> dict:
    """``jetson_clocks --show`` -> per-CPU, GPU and EMC clocks and the power mode.

    Returns ``{"soc_family", "machine", "online_cpus", "cpus": {"cpu0": {"online",
    "governor", "min_khz", "max_khz", "cur_khz"}}, "gpu": {"min_hz", "max_hz",
    "cur_hz"} | None, "emc": {"min_hz", "max_hz", "cur_hz", "freq_override"} | None,
    "nv_power_mode", "clocks_locked"}``. CPU clocks are kHz (cpufreq units), GPU and EMC
    Hz, as the tool prints them. ``clocks_locked`` is True when every CPU and the GPU
    run with min == max == current, which is what ``jetson_clocks`` sets.
    Raises ValueError when no line is recognised.
    """
    out: dict = {
        "soc_family": None,
        "machine": None,
        "online_cpus": None,
        "cpus": {},
        "gpu": None,
        "emc": None,
        "nv_power_mode": None,
    }
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("SOC family:"):
            m = re.match(r"SOC family:\s*(\S+)\s*(?:Machine:\s*(.*))?$", line)
            if m:
                out["soc_family"], out["machine"] = m.group(1), (m.group(2) or "").strip() or None
            continue
        if line.startswith("Online CPUs:"):
            out["online_cpus"] = line.split(":", 1)[1].strip()
            continue
        m = _POWER_MODE.search(line)
        if m:
            out["nv_power_mode"] = m.group(1)
            continue
        m = _CPU_LINE.match(line)
        if m:
            # "IdleStates: WFI=1 c7=1" follows the clocks; keep only the part before it.
            kv = dict(_KV.findall(m.group(2).split("IdleStates:")[0]))
            governor = kv.get("Governor") or kv.get("Gonvernor")  # TX1 BSPs misspell it
            out["cpus"][f"cpu{m.group(1)}"] = {
                "online": kv.get("Online", "1") == "1",
                "governor": governor,
                "min_khz": _int_or_none(kv.get("MinFreq")),
                "max_khz": _int_or_none(kv.get("MaxFreq")),
                "cur_khz": _int_or_none(kv.get("CurrentFreq")),
            }
            continue
        m = _UNIT_LINE.match(line)
        if m:
            kv = dict(_KV.findall(m.group(2)))
            unit = {
                "min_hz": _int_or_none(kv.get("MinFreq")),
                "max_hz": _int_or_none(kv.get("MaxFreq")),
                "cur_hz": _int_or_none(kv.get("CurrentFreq")),
            }
            if m.group(1) == "EMC":
                unit["freq_override"] = _int_or_none(kv.get("FreqOverride"))
            out[m.group(1).lower()] = unit
    if not (out["cpus"] or out["gpu"] or out["nv_power_mode"]):
        raise ValueError("no clock lines in jetson_clocks --show output")
    out["cpus"] = dict(sorted(out["cpus"].items(), key=lambda kv: natural_index(kv[0])))
    out["clocks_locked"] = clocks_locked(out)
    return out


def clocks_locked(show: dict) -> bool:
    """True when every online CPU and the GPU have min == max == current (jetson_clocks is on)."""
    units = [c for c in show["cpus"].values() if c["online"]]
    gpu = show.get("gpu")
    if gpu:
        units.append({"min_khz": gpu["min_hz"], "max_khz": gpu["max_hz"], "cur_khz": gpu["cur_hz"]})
    if not units:
        return False
    return all(
        u["min_khz"] is not None and u["min_khz"] == u["max_khz"] == u["cur_khz"] for u in units
    )


def parse_l4t_release(text: str) -> dict:
    """``/etc/nv_tegra_release`` -> ``{"release": "R36", "revision": "4.0", "version": "36.4.0", ...}``.

    Also ``board``, ``gcid``, ``date`` when present and the first line as ``raw``.
    Raises ValueError when the first line is not an L4T release line.
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = _L4T.search(first)
    if not m:
        raise ValueError(f"not an nv_tegra_release line: {first[:60]!r}")
    fields = {}
    for part in m.group(3).split(","):
        if ":" in part:
            key, value = part.split(":", 1)
            fields[key.strip().lower()] = value.strip()
    return {
        "release": f"R{m.group(1)}",
        "revision": m.group(2),
        "version": f"{m.group(1)}.{m.group(2)}",
        "board": fields.get("board"),
        "gcid": fields.get("gcid"),
        "date": fields.get("date"),
        "raw": first.strip(),
    }


def _gpu_devfreq_candidates(root: str | os.PathLike) -> list:
    paths = [under(root, d) for d in GPU_DEVFREQ_DIRS]
    base = under(root, DEVFREQ_CLASS)
    try:
        names = sorted(n for n in os.listdir(base) if _GPU_DEVFREQ_NAME.search(n))
    except OSError:
        names = []
    return paths + [base / n for n in names]


def read_gpu_freq(root: str | os.PathLike) -> dict:
    """GPU devfreq ``cur_freq``/``min_freq``/``max_freq`` (Hz), from the first path that reads.

    Returns ``{"cur_hz", "min_hz", "max_hz", "path"}``; all ``None`` with ``reason``
    when no GPU devfreq node exists.
    """
    for path in _gpu_devfreq_candidates(root):
        cur = parse_int(read_value(path / "cur_freq"))
        if cur is not None:
            return {
                "cur_hz": cur,
                "min_hz": parse_int(read_value(path / "min_freq")),
                "max_hz": parse_int(read_value(path / "max_freq")),
                "path": "/" + str(path.relative_to(root)),
                "reason": None,
            }
    return {
        "cur_hz": None,
        "min_hz": None,
        "max_hz": None,
        "path": None,
        "reason": "no GPU devfreq node",
    }


def is_jetson(root: str | os.PathLike) -> bool:
    """True when the board has an L4T release file or its device-tree model names a Jetson."""
    if under(root, L4T_RELEASE).exists():
        return True
    model = read_value(under(root, DEVICE_TREE_MODEL)) or ""
    return "Jetson" in model


def read_l4t(root: str | os.PathLike) -> tuple[dict | None, str | None]:
    """``(parsed L4T release, None)`` or ``(None, reason)``."""
    text = read_text(under(root, L4T_RELEASE))
    if text is None:
        return None, f"no {L4T_RELEASE}"
    try:
        return parse_l4t_release(text), None
    except ValueError as e:
        return None, str(e)


def read_nvpmodel(timeout_s: float = 3.0) -> tuple[dict | None, str | None]:
    """``(nvpmodel -q parsed, None)`` or ``(None, reason)``."""
    text, reason = run_command(["nvpmodel", "-q"], timeout_s=timeout_s)
    if text is None:
        return None, reason
    try:
        return parse_nvpmodel(text), None
    except ValueError as e:
        return None, str(e)


def read_jetson_clocks(timeout_s: float = 3.0) -> tuple[dict | None, str | None]:
    """``(jetson_clocks --show parsed, None)`` or ``(None, reason)``."""
    text, reason = run_command(["jetson_clocks", "--show"], timeout_s=timeout_s)
    if text is None:
        return None, reason
    try:
        return parse_jetson_clocks(text), None
    except ValueError as e:
        return None, str(e)


def detected(root: str | os.PathLike) -> bool:
    """Whether the board under ``root`` is a Jetson: an L4T release file or a device-tree
    model naming one, or ``nvpmodel`` on PATH (the family's detection)."""
    return is_jetson(root) or shutil.which("nvpmodel") is not None


def read_jetson(root: str | os.PathLike, timeout_s: float = 3.0) -> dict:
    """Power mode, clocks, GPU frequency and L4T release of a Jetson.

    Returns ``{"available", "reason", "l4t", "nvpmodel", "jetson_clocks", "gpu",
    "absent": {key: reason}}``; a reading that cannot be taken is ``None`` and its
    reason is in ``absent``.
    """
    if not detected(root):
        return {"available": False, "reason": "not a Jetson (no L4T release, model, or nvpmodel)"}
    absent: dict[str, str] = {}
    l4t, why = read_l4t(root)
    if why:
        absent["l4t"] = why
    nvp, why = read_nvpmodel(timeout_s)
    if why:
        absent["nvpmodel"] = why
    jc, why = read_jetson_clocks(timeout_s)
    if why:
        absent["jetson_clocks"] = why
    gpu = read_gpu_freq(root)
    if gpu["reason"]:
        absent["gpu"] = gpu["reason"]
    return {
        "available": True,
        "reason": None,
        "l4t": l4t,
        "nvpmodel": nvp,
        "jetson_clocks": jc,
        "gpu": gpu,
        "absent": absent,
    }


def fingerprint_section(
    root: str | os.PathLike, reading: dict | None, timeout_s: float = 2.0
) -> tuple[dict, dict] | None:
    """The Jetson's section of the fingerprint (L4T release, nvpmodel, jetson_clocks: the
    fields ``contract/board_families.py`` declares) and what of it is absent, or None when
    the board is not a Jetson. ``reading`` is :func:`read_jetson`'s when taken already;
    otherwise only those fields are read (not the GPU)."""
    if reading is None:
        if not detected(root):
            return None
        reading = {"available": True, "absent": {}}
        for key, reader in (
            ("l4t", lambda: read_l4t(root)),
            ("nvpmodel", lambda: read_nvpmodel(timeout_s)),
            ("jetson_clocks", lambda: read_jetson_clocks(timeout_s)),
        ):
            reading[key], why = reader()
            if why:
                reading["absent"][key] = why
    if not reading.get("available"):
        return None
    section = {k: reading[k] for k in board_family("jetson").fields}
    absent = reading["absent"]
    return section, {k: absent[k] for k in section if k in absent}
