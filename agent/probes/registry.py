"""The board families' probes: each family of ``contract/board_families.py`` with its
module here, found by its name (``raspberry_pi.py``, ``jetson.py``), which brings its
reader for ``info`` (``read_<name>``), its part of the fingerprint
(``fingerprint_section``), where its firmware keeps throttle state its part of each
telemetry sample (``telemetry_reader``), and where it has a power-management IC to read,
its rails (``power_reader``). ``read_all`` and ``fingerprint.py`` take every family from
:func:`board_probes` and name none.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from edgequal.contract.board_families import BOARD_FAMILIES, BoardFamily

PACKAGE = "edgequal.agent.probes"


@dataclass(frozen=True)
class BoardProbe:
    """A board family's probe: its reader for ``info`` and its part of the fingerprint."""

    family: BoardFamily
    read: Callable[..., dict]
    """``read_<name>(root)``: every reading, ``{"available": False, "reason"}`` on other boards."""
    fingerprint_section: Callable[..., tuple[dict, dict] | None]
    """``(root, reading or None, timeout_s)`` -> (section, absent) or None on other boards."""
    power_reader: Callable[..., Callable[[], dict | None] | None] | None = None
    """``(root)`` -> a callable giving watts per rail of the board's power-management IC,
    or None on other boards; None for a family with none."""
    telemetry_reader: Callable[..., Callable[[], dict] | None] | None = None
    """``(root, use_commands, measure_clock, timeout_s)`` -> a callable giving the family's
    fields of each telemetry sample, or None on other boards; None for a family with none."""

    @property
    def name(self) -> str:
        """The family's name: its fingerprint section and ``info`` key."""
        return self.family.name


def board_probes() -> tuple[BoardProbe, ...]:
    """Every board family of ``BOARD_FAMILIES`` with its probe module (imported here, on use)."""
    probes = []
    for family in BOARD_FAMILIES:
        module = importlib.import_module(f"{PACKAGE}.{family.name}")
        probes.append(
            BoardProbe(
                family,
                getattr(module, f"read_{family.name}"),
                module.fingerprint_section,
                getattr(module, "power_reader", None),
                getattr(module, "telemetry_reader", None),
            )
        )
    return tuple(probes)


__all__ = ["BoardProbe", "board_probes"]
