"""Small readers shared by the probes.

Every path is taken under a root (``/`` on a device, a recorded tree in tests, the
device emulator's tree), and every failure is a ``None`` with a reason instead of an
exception: a probe must describe a board with missing or unreadable sensors, never
stop on one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

# Sysfs and procfs attributes are a page at most; the cap keeps a wrong root
# (a regular file where a sysfs attribute was expected) from being read whole.
_MAX_READ_BYTES = 65536


def under(root: str | os.PathLike, path: str) -> Path:
    """``path`` (absolute, e.g. ``/sys/class/thermal``) re-rooted under ``root``."""
    return Path(root) / path.lstrip("/")


def read_text(path: str | os.PathLike) -> str | None:
    """The text of a small file, or ``None`` when it is missing or unreadable (any OSError)."""
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_READ_BYTES)
    except OSError:
        return None
    return data.decode("utf-8", "replace")


def read_value(path: str | os.PathLike) -> str | None:
    """A one-value attribute: stripped of whitespace and NULs; ``None`` when unreadable or empty."""
    text = read_text(path)
    if text is None:
        return None
    value = text.strip().strip("\x00").strip()
    return value or None


def parse_int(text: str | None) -> int | None:
    """An integer attribute (``"1500000\\n"``), or ``None`` for empty or non-numeric text."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_cpu_list(text: str | None) -> list[int] | None:
    """A kernel CPU list (``"0-3,5"`` or ``"0 1 2 3"``) as sorted CPU numbers; ``None`` if malformed."""
    if text is None:
        return None
    cpus: set[int] = set()
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        m = _RANGE.match(part)
        if not m:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            return None
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def natural_index(name: str) -> tuple[str, int]:
    """Sort key so ``thermal_zone10`` comes after ``thermal_zone9``."""
    m = re.match(r"^(.*?)(\d+)$", name)
    if not m:
        return (name, -1)
    return (m.group(1), int(m.group(2)))


def run_command(argv: list[str], timeout_s: float = 2.0) -> tuple[str | None, str | None]:
    """Run a board command found on PATH; returns ``(stdout, None)`` or ``(None, reason)``.

    Board tools (``vcgencmd``, ``nvpmodel``, ``jetson_clocks``) are looked up on PATH
    rather than under the probe root: they talk to firmware or drivers, not files.
    """
    exe = shutil.which(argv[0])
    if exe is None:
        return None, f"{argv[0]} not found on PATH"
    try:
        proc = subprocess.run(
            [exe, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(argv)} timed out after {timeout_s:g} s"
    except OSError as e:
        return None, f"{' '.join(argv)} could not run: {e}"
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        tail = f": {detail[-1]}" if detail else ""
        return None, f"{' '.join(argv)} exited with {proc.returncode}{tail}"
    return proc.stdout, None
