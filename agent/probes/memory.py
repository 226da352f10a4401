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
