"""How this host reaches boards over SSH: :class:`SSHOptions`, read once, passed whole.

The flags (``--known-hosts``, ``--ssh-key``, ``--agent-cmd``), a lab file's
``[devices.NAME]`` keys and a library call each become one :class:`SSHOptions`
where they are read; the session (``ssh_session.py``) and the transport
(``ssh.py``) take it whole. It lives apart from ``ssh_target.py`` because every
device's options are built with it, and building them must not import paramiko
for a grpc:// or local device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_STEP_TIMEOUT_S = 60.0


def _user_path(path: str | Path | None) -> Path | None:
    return Path(path).expanduser() if path else None


@dataclass(frozen=True)
class SSHOptions:
    """How this host reaches a board over SSH; the defaults are what ``ssh`` itself does.

    ``known_hosts`` replaces ``~/.ssh/known_hosts`` and the global file; ``key_file``
    is tried before the config's ``IdentityFile``, the ssh-agent (``allow_agent``) and
    the default ``~/.ssh/id_*`` keys (``look_for_keys``); ``ssh_config`` replaces
    ``~/.ssh/config``. ``agent_cmd`` is ``edgequal-agent``'s command line on the board
    (None: ``edgequal-agent`` on the login PATH, else the default install's venv; the
    agent install and agent status run the one under their install prefix instead).
    ``step_timeout_s`` bounds each step that makes no progress. Paths may start with ``~``.
    """

    known_hosts: Path | None = None
    key_file: Path | None = None
    ssh_config: Path | None = None
    allow_agent: bool = True
    look_for_keys: bool = True
    agent_cmd: str | None = None
    step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S

    def __post_init__(self) -> None:
        # Callers pass str or Path, with or without ~; the session reads plain Paths.
        for name in ("known_hosts", "key_file", "ssh_config"):
            object.__setattr__(self, name, _user_path(getattr(self, name)))


__all__ = ["DEFAULT_STEP_TIMEOUT_S", "SSHOptions"]
