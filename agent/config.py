"""Where the agent keeps its state, the root path its probes read from, and what the
operator sets in ``agent.toml`` (or ``serve`` flags): store limits, worker memory."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path


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


def probe_root(explicit: str | os.PathLike | None = None) -> Path:
    """The prefix for every /sys, /proc and /etc read: ``--root``, else ``$EDGEQUAL_ROOT``, else ``/``."""
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("EDGEQUAL_ROOT") or "/")


OUTPUT_FAULT_ENV = "EDGEQUAL_OUTPUT_FAULT"


def output_fault_setting() -> str | None:
    """The output fault injector's setting (``runtimes/faults.py``), from
    ``$EDGEQUAL_OUTPUT_FAULT``: None (no fault) unless the agent was started with it."""
    return os.environ.get(OUTPUT_FAULT_ENV) or None


# -- the agent's configuration file (agent.toml) ------------------------------------

CONFIG_FILE = "agent.toml"
CONFIG_ENV = "EDGEQUAL_AGENT_CONFIG"

_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def config_path(state_dir: Path) -> Path:
    """``$EDGEQUAL_AGENT_CONFIG``, else ``agent.toml`` in the agent's state directory."""
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else Path(state_dir) / CONFIG_FILE


def read_config(path: Path | None) -> dict:
    """The agent's configuration file as a table; a missing file (or None) is empty.

    A file that cannot be read or is not TOML is a BadInput naming the file.
    """
    from edgequal.contract.errors import BadInput

    try:
        import tomllib  # novermin: the fallback below is for 3.10
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    if path is None:
        return {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(
            f"cannot read the agent configuration {path}: {getattr(e, 'strerror', None) or e}"
        ) from e
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise BadInput(f"agent configuration {path}: {e}") from e


def parse_size_bytes(value: object, what: str) -> int:
    """A size: an integer number of bytes, or text such as ``10GiB``, ``512MiB``, ``500MB``.

    BadInput naming ``what`` for anything else (negative, fractional bytes, unknown unit).
    """
    import re

    from edgequal.contract.errors import BadInput

    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = re.fullmatch(
        r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", value if isinstance(value, str) else ""
    )
    unit = m.group(2).upper() if m else None
    if m is None or unit not in _SIZE_UNITS:
        raise BadInput(
            f"{what}: not a size: {str(value)[:40]!r}",
            hint="give bytes, or a number with a unit: 500MB, 512MiB, 10GiB",
        )
    size = float(m.group(1)) * _SIZE_UNITS[unit]
    if size != int(size) or size > 2**63:
        raise BadInput(f"{what}: {value!r} is not a whole number of bytes")
    return int(size)


CONFIG_TABLES = ("store", "worker", "runtimes", "coload", "model_signing")
"""The tables of ``agent.toml``; any other is refused by name, so a setting such as
``[model_signing] require = true`` is never silently ignored under a misspelt table."""

_MAX_SECONDS = 3600


def _seconds(value: object, what: str) -> float:
    """A duration in seconds: a number above 0 and at most an hour; BadInput naming ``what``."""
    from edgequal.contract.errors import BadInput

    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not 0 < value <= _MAX_SECONDS:
        raise BadInput(
            f"{what}: not a number of seconds: {str(value)[:40]!r}",
            hint=f"give seconds above 0, at most {_MAX_SECONDS}: e.g. 60",
        )
    return float(value)


_SETTINGS = {
    "store": {
        "max_artifact": ("max_artifact_bytes", parse_size_bytes),
        "quota": ("quota_bytes", parse_size_bytes),
        "min_free": ("min_free_bytes", parse_size_bytes),
    },
    "worker": {"memory_limit": ("memory_limit_bytes", parse_size_bytes)},
    "runtimes": {"probe_timeout_s": ("env_probe_timeout_s", _seconds)},
}
"""Each table's keys: the :class:`AgentSettings` field each sets, and how its value is read."""


@dataclass(frozen=True)
class AgentSettings:
    """What the operator sets for the agent: store limits, the worker's memory limit and how
    long a runtime environment's trial import may take.

    Each is None when neither a ``serve`` flag nor ``agent.toml`` sets it (the agent's
    default then applies: docs/protocol.md "Limits"). In ``agent.toml``::

        [store]
        quota = "10GiB"          # everything stored plus uploads in progress
        min_free = "256MiB"      # free disk uploads never take (the free-space floor)
        max_artifact = "2GiB"    # one artifact

        [worker]
        memory_limit = "512MiB"  # a worker's RSS; default: half the board's memory

        [runtimes]
        probe_timeout_s = 60     # an environment's trial import; default 20
    """

    max_artifact_bytes: int | None = None
    quota_bytes: int | None = None
    min_free_bytes: int | None = None
    memory_limit_bytes: int | None = None
    env_probe_timeout_s: float | None = None

    @classmethod
    def from_config(cls, config: dict, path: Path | str = CONFIG_FILE) -> AgentSettings:
        """The settings of a configuration table (:func:`read_config`); BadInput names the key."""
        from edgequal.contract.errors import BadInput

        unknown = sorted(set(config) - set(CONFIG_TABLES))
        if unknown:
            close = [t for t in CONFIG_TABLES if t.startswith(unknown[0][:3])]
            raise BadInput(
                f"agent configuration {path}: unknown table [{unknown[0]}]"
                + (f" (did you mean [{close[0]}]?)" if close else ""),
                hint=f"agent.toml takes {', '.join(f'[{t}]' for t in CONFIG_TABLES)}",
            )
        values = {}
        for section, keys in _SETTINGS.items():
            table = config.get(section, {})
            if not isinstance(table, dict):
                raise BadInput(f"agent configuration {path}: [{section}] must be a table")
            unknown = sorted(set(table) - set(keys))
            if unknown:
                raise BadInput(
                    f"agent configuration {path}: unknown key [{section}] {unknown[0]}",
                    hint=f"[{section}] takes {', '.join(keys)}",
                )
            for key, value in table.items():  # in the file's order: the first bad one named
                field_name, parse = keys[key]
                values[field_name] = parse(value, f"agent configuration {path}: [{section}] {key}")
        return cls(**values)

    def overridden(self, **flags: int | None) -> AgentSettings:
        """These settings with every flag that was given (not None) in place of the file's."""
        return replace(self, **{k: v for k, v in flags.items() if v is not None})

    @property
    def memory_limit_mb(self) -> int | None:
        """The worker memory limit in MiB (the unit of a plan's ``memory_limit_mb``)."""
        if self.memory_limit_bytes is None:
            return None
        return max(1, self.memory_limit_bytes // 2**20)

    def server_options(self) -> dict:
        """Keyword arguments of ``build_server`` / ``serve`` for the settings that are set."""
        options = {
            "max_artifact_bytes": self.max_artifact_bytes,
            "quota_bytes": self.quota_bytes,
            "min_free_bytes": self.min_free_bytes,
            "memory_limit_mb": self.memory_limit_mb,
            "env_probe_timeout_s": self.env_probe_timeout_s,
        }
        return {k: v for k, v in options.items() if v is not None}

    def store_options(self) -> dict:
        """Keyword arguments of ``ArtifactStore`` for the store limits that are set."""
        options = {
            "max_artifact_bytes": self.max_artifact_bytes,
            "quota_bytes": self.quota_bytes,
            "reserve_bytes": self.min_free_bytes,
        }
        return {k: v for k, v in options.items() if v is not None}


def read_settings(state_dir: Path, **flags: int | None) -> AgentSettings:
    """The operator's settings: ``serve`` flags over the agent's configuration file."""
    from .model_signature import SigningPolicy

    path = config_path(state_dir)
    config = read_config(path)
    SigningPolicy.from_config(config, path)  # refused at start, not at the first run
    return AgentSettings.from_config(config, path).overridden(**flags)
