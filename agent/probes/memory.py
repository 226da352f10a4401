"""A process's resident memory: ``<proc root>/<pid>/statm`` where there is a /proc, psutil
where there is none (macOS).

The worker reads its own RSS around the model load, the supervisor polls the worker's
against the memory limit; both through :func:`read_rss_bytes`. psutil is imported only
where /proc is absent, so a worker on Linux stays as small as it was.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config import proc_root as default_proc_root


def parse_statm(text: str, page_size: int) -> int:
    """Resident bytes from a statm line (``size resident shared ...``, in pages)."""
    return int(text.split()[1]) * page_size


def read_rss_bytes(pid: int, proc_root: str | os.PathLike | None = None) -> int:
    """Resident set size of ``pid`` in bytes: statm under ``proc_root`` (default
    :func:`edgequal.agent.config.proc_root`), else psutil. Raises ``psutil.NoSuchProcess``
    (or ``OSError``) when the process is gone."""
    path = Path(proc_root or default_proc_root()) / str(pid) / "statm"
    try:
        with open(path) as f:
            return parse_statm(f.read(), os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError):
        import psutil

        return psutil.Process(pid).memory_info().rss


def parse_vm_hwm(text: str) -> int | None:
    """The peak resident bytes (``VmHWM:`` in kB) of a ``/proc/PID/status`` text, or None."""
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else None
    return None


def read_peak_rss_bytes(pid: int, proc_root: str | os.PathLike | None = None) -> int | None:
    """Peak resident set size of ``pid``'s own memory (``VmHWM`` of its status), or None
    where there is no /proc.

    Not ``ru_maxrss``: Linux keeps that across ``execve`` from the copy of the parent's
    memory that ``fork`` made, so a worker started by an agent of 80 MB reports at least
    80 MB whatever its model uses; ``VmHWM`` belongs to the memory the process has now.
    """
    path = Path(proc_root or default_proc_root()) / str(pid) / "status"
    try:
        with open(path) as f:
            return parse_vm_hwm(f.read())
    except OSError:
        return None
