"""Where the host keeps its files: every XDG directory lookup of the host is here.

- config (``known_devices``, ``nonces``, device tokens): ``$EDGEQUAL_CONFIG_DIR``,
  else ``$XDG_CONFIG_HOME/edgequal``, else ``~/.config/edgequal``;
- state (the local agent's state, reports written without ``-o``):
  ``$XDG_STATE_HOME/edgequal``, else ``~/.local/state/edgequal``.
"""

from __future__ import annotations

import os
from pathlib import Path

from edgequal.contract.state_dirs import xdg_state_home

__all__ = ["config_dir", "reports_dir", "state_dir"]


def config_dir() -> Path:
    """Return the host's config dir: $EDGEQUAL_CONFIG_DIR, $XDG_CONFIG_HOME/edgequal or ~/.config/edgequal."""
    explicit = os.environ.get("EDGEQUAL_CONFIG_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg:
        return Path(xdg).expanduser() / "edgequal"
    return Path.home() / ".config" / "edgequal"


def state_dir() -> Path:
    """Return the host's state dir: $XDG_STATE_HOME/edgequal or ~/.local/state/edgequal."""
    return xdg_state_home() / "edgequal"


def reports_dir() -> Path:
    """Where ``qualify`` writes a report given no ``-o``: ``<state dir>/reports``."""
    return state_dir() / "reports"
