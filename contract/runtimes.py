"""The runtime names a plan, a golden set or a CLI may give, and the rule for a runtime
environment's name: checked on the host before anything is sent and again on the agent."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from .errors import BadInput

RUNTIME_NAMES = ("onnxruntime", "litert")


def check_runtime_name(name: str) -> str:
    """``name`` if it names a runtime adapter, else BadInput naming the accepted names."""
    if name not in RUNTIME_NAMES:
        raise BadInput(
            f"unknown runtime '{name}'", hint=f"use one of: auto, {', '.join(RUNTIME_NAMES)}"
        )
    return name


MAX_ENVS_PER_PLAN = 8

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def check_env_name(name: object) -> str:
    """A valid environment name (lowercase letters, digits, ``.``, ``_``, ``-``; at most 64)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadInput(
            f"bad runtime environment name {str(name)[:70]!r}",
            hint="use lowercase letters, digits, '.', '_' and '-' (at most 64), e.g. onnxruntime-1.20.1",
        )
    return name


@dataclass
class RuntimeStatus:
    """Whether one runtime can be used here: its version, or why not."""

    name: str
    available: bool
    version: str = ""
    reason: str = ""
    distribution: str = ""

    def to_json(self) -> dict:
        """The status as a JSON object (the keys of the protobuf ``RuntimeStatus``)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RuntimeStatus:
        """The inverse of :meth:`to_json`; missing keys take their defaults."""
        return cls(
            name=str(data.get("name", "")),
            available=bool(data.get("available", False)),
            version=str(data.get("version") or ""),
            reason=str(data.get("reason") or ""),
            distribution=str(data.get("distribution") or ""),
        )
