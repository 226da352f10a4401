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
docs/probes.md. A family whose firmware keeps throttle flags brings its throttle hook too:
the keys its probe adds to every telemetry sample (``telemetry_reader`` in its module), the
indicator those flags fire and the pure rule that reads them, so telemetry, the sustained
score and a plan's ``throttle_indicators`` name no board.
"""

from __future__ import annotations

from collections.abc import Callable
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
    telemetry_fields: tuple[str, ...] = ()
    """The keys its probe's ``telemetry_reader`` adds to every telemetry sample (None
    where the board is not one)."""
    throttle_indicator: str | None = None
    """The throttle indicator its firmware's flags fire (a plan's ``throttle_indicators``)."""
    throttle_field: str | None = None
    """The telemetry sample's key holding those flags, as its probe decoded them."""
    throttle_active: Callable[[dict | None], bool] | None = None
    """Whether the decoded flags say the board is throttling now (pure)."""
    under_voltage: Callable[[dict | None], bool] | None = None
    """Whether the decoded flags say the supply is under-voltage now (pure)."""
    measured_clock_field: str | None = None
    """The telemetry sample's key holding the CPU clock the firmware measured (kHz), read
    beside cpufreq's: a clock drop cpufreq does not show."""

    def category_of(self, key: str) -> str | None:
        """The category of a flattened fingerprint key (``jetson.nvpmodel.mode``) of this
        family's section; None when the key is not one of its fields."""
        section, _, rest = key.partition(".")
        if section != self.name:
            return None
        field = rest.split(".", 1)[0]
        return self.fields.get(field)


def pi_flags_throttling(flags: dict | None) -> bool:
    """True when a Raspberry Pi's decoded ``get_throttled`` flags (``probes/raspberry_pi.py``
    ``parse_throttled``) have a performance-limiting bit set *now*: frequency capped,
    throttled, soft temperature limit. Under-voltage (bit 0) is a failure of its own."""
    if not flags:
        return False
    now = flags["now"]
    return now["freq_capped"] or now["throttled"] or now["soft_temp_limit"]


def pi_flags_under_voltage(flags: dict | None) -> bool:
    """True when a Raspberry Pi's decoded ``get_throttled`` flags say under-voltage now."""
    return bool(flags and flags["now"]["under_voltage"])


BOARD_FAMILIES: tuple[BoardFamily, ...] = (
    BoardFamily(
        name="raspberry_pi",
        fields={"get_throttled": "throttle state", "get_throttled_source": "throttle state"},
        docs="Raspberry Pi: a device-tree model naming one, its firmware's `get_throttled`, "
        "or `vcgencmd` on PATH; records the firmware's throttle flags",
        telemetry_fields=("arm_clock_khz", "throttled"),
        throttle_indicator="get_throttled",
        throttle_field="throttled",
        throttle_active=pi_flags_throttling,
        under_voltage=pi_flags_under_voltage,
        measured_clock_field="arm_clock_khz",
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


__all__ = [
    "BOARD_FAMILIES",
    "BOARD_FAMILY_NAMES",
    "BoardFamily",
    "board_family",
    "pi_flags_throttling",
    "pi_flags_under_voltage",
]
