"""Where the agent keeps its state, and the root path its probes read from."""

from __future__ import annotations

import os
from pathlib import Path


def xdg_state_home() -> Path:
    """``$XDG_STATE_HOME``, else ``~/.local/state`` (the XDG base directory rule; host and agent)."""
    xdg = os.environ.get("XDG_STATE_HOME")
    return Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"


def default_state_dir() -> Path:
    """``$EDGEQUAL_AGENT_STATE``, else ``$XDG_STATE_HOME/edgequal-agent``, else ``~/.local/state/edgequal-agent``."""
    env = os.environ.get("EDGEQUAL_AGENT_STATE")
    if env:
        return Path(env)
    return xdg_state_home() / "edgequal-agent"


def probe_root(explicit: str | os.PathLike | None = None) -> Path:
    """The prefix for every /sys, /proc and /etc read: ``--root``, else ``$EDGEQUAL_ROOT``, else ``/``."""
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("EDGEQUAL_ROOT") or "/")


def proc_root(explicit: str | os.PathLike | None = None) -> Path:
    """Where the worker and the contention sampler read ``/proc``: ``explicit``, else
    ``$EDGEQUAL_PROC_ROOT``, else ``/proc``.

    Apart from the probe root: a board emulator replaces ``/sys``, never the processes
    competing for this machine's CPUs. Where it is absent (macOS), memory comes from
    psutil and contention is not measurable (docs/measurement.md).
    """
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("EDGEQUAL_PROC_ROOT") or "/proc")
