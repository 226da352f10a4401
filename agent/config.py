"""Where the agent keeps its state, and the root path its probes read from."""

from __future__ import annotations

import os
from pathlib import Path


def default_state_dir() -> Path:
    """``$EDGEQUAL_AGENT_STATE``, else ``$XDG_STATE_HOME/edgequal-agent``, else ``~/.local/state/edgequal-agent``."""
    env = os.environ.get("EDGEQUAL_AGENT_STATE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "edgequal-agent"


def probe_root(explicit: str | os.PathLike | None = None) -> Path:
    """The prefix for every /sys, /proc and /etc read: ``--root``, else ``$EDGEQUAL_ROOT``, else ``/``."""
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("EDGEQUAL_ROOT") or "/")
