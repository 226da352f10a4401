"""The board families the agent recognises, each declared once: every list of them derives
from :data:`BOARD_FAMILIES`.

A board family (a Raspberry Pi, an NVIDIA Jetson) is a kind of board with state of its own
that a run must record: throttle flags, a power mode, locked clocks, a firmware release.
Its probe is the agent module ``agent/probes/<name>.py``, which says whether the board
under a root is one (its detection) and reads it: ``read_<name>(root)`` for
``edgequal-agent info``, ``fingerprint_section(root, reading, timeout_s)`` for the
fingerprint. Here is what the host needs of it without importing the agent: the name
(the fingerprint's section and ``info``'s key), the fields that section holds and what a
change of each means when two reports are compared, and the family's line in
docs/probes.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BoardFamily:
    """One board family, everything that names it declared once."""

    name: str
    """The fingerprint's section and ``info``'s key; its probe is ``agent/probes/<name>.py``."""
    fields: dict[str, str]
    """The fields of its fingerprint section, each with the category a change of it is
    (``host/judge/baseline.py``: firmware, power mode, clocks, throttle state...)."""
    docs: str
    """Its line in docs/probes.md's table of board families."""

    def category_of(self, key: str) -> str | None:
        """The category of a flattened fingerprint key (``jetson.nvpmodel.mode``) of this
        family's section; None when the key is not one of its fields."""
        section, _, rest = key.partition(".")
        if section != self.name:
            return None
        field = rest.split(".", 1)[0]
        return self.fields.get(field)


BOARD_FAMILIES: tuple[BoardFamily, ...] = (
    BoardFamily(
        name="raspberry_pi",
        fields={"get_throttled": "throttle state", "get_throttled_source": "throttle state"},
        docs="Raspberry Pi: a device-tree model naming one, its firmware's `get_throttled`, "
        "or `vcgencmd` on PATH; records the firmware's throttle flags",
    ),
    BoardFamily(
        name="jetson",
        fields={"l4t": "firmware", "nvpmodel": "power mode", "jetson_clocks": "clocks"},
        docs="NVIDIA Jetson: `/etc/nv_tegra_release`, a device-tree model naming one, or "
        "`nvpmodel` on PATH; records the L4T release, the power mode and `jetson_clocks`",
    ),
)

BOARD_FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in BOARD_FAMILIES)


def board_family(name: str) -> BoardFamily:
    """The family called ``name``; KeyError for a name no family has."""
    for family in BOARD_FAMILIES:
        if family.name == name:
            return family
    raise KeyError(name)


__all__ = ["BOARD_FAMILIES", "BOARD_FAMILY_NAMES", "BoardFamily", "board_family"]
