"""Where an agent keeps its state: the XDG rule both sides follow, the agent's default, and the
state directory of the agent ``edgequal`` starts on this host (``--device local``)."""

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


def local_agent_state_dir() -> Path:
    """The state dir of the agent ``edgequal`` starts on this host (``--device local``):
    ``$EDGEQUAL_LOCAL_STATE``, else ``$XDG_STATE_HOME/edgequal/local-agent``.

    Here, not in the host, so ``edgequal-agent key show`` can name where that key lives.
    """
    explicit = os.environ.get("EDGEQUAL_LOCAL_STATE")
    if explicit:
        return Path(explicit)
    return xdg_state_home() / "edgequal" / "local-agent"
