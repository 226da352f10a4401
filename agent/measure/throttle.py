"""Which of a telemetry sample's readings count as throttling: the one throttle rule
(measurement.md §6.4), pure over the sample dicts the agent's sampler records
(``probes/telemetry.py``), a board family's firmware flags read by the family's own rule
(``contract/board_families.py``). The sustained score and the attribution of slow windows
read it; nothing here reads a file or runs a command, or names a board.
"""

from __future__ import annotations

from collections.abc import Mapping

from edgequal.contract.board_families import BOARD_FAMILIES
from edgequal.contract.plan import (
    INDICATOR_CLOCK_DROP,
    INDICATOR_COOLING,
    INDICATOR_PASSIVE_TRIP,
)


def firmware_throttles(sample: Mapping) -> list[str]:
    """The board families' firmware indicators that fire in one sample: each family's
    ``throttle_active`` over the flags its probe recorded (``contract/board_families.py``)."""
    return [
        f.throttle_indicator
        for f in BOARD_FAMILIES
        if f.throttle_active is not None and f.throttle_active(sample.get(f.throttle_field))
    ]


def under_voltage(sample: Mapping) -> bool:
    """Whether a board family's firmware flags in one sample say under-voltage now."""
    return any(
        f.under_voltage is not None and f.under_voltage(sample.get(f.throttle_field))
        for f in BOARD_FAMILIES
    )


def measured_clocks_khz(sample: Mapping) -> list[int]:
    """The CPU clocks a board family's firmware measured in one sample (kHz), beside
    cpufreq's policies (a Pi's ``arm_clock_khz``)."""
    return [
        sample[f.measured_clock_field]
        for f in BOARD_FAMILIES
        if f.measured_clock_field and sample.get(f.measured_clock_field)
    ]


def throttle_reasons(
    sample: Mapping,
    *,
    trip_c: float | None = None,
    nominal_khz: Mapping[str, int] | int | None = None,
    clock_ratio: float = 0.97,
) -> list[str]:
    """The throttle indicators that fire in one sample (measurement.md §6.4). Pure.

    - a board family's firmware indicator (``get_throttled``: a Pi firmware bit 1, 2 or 3
      is set now), by :func:`firmware_throttles`;
    - ``clock_drop``: a measured clock is below ``clock_ratio`` x nominal (per policy when
      ``nominal_khz`` is a mapping; a firmware-measured clock, a Pi's ``arm_clock_khz``, is
      compared with the smallest nominal when given one);
    - ``cooling_device``: a CPU-throttling cooling device has ``cur_state > 0``;
    - ``passive_trip``: ``temp_c`` has reached ``trip_c``.

    Under-voltage is not a throttle indicator here (a Pi's is ``throttled["now"]["under_voltage"]``).
    """
    reasons = firmware_throttles(sample)
    if nominal_khz is not None:
        clocks = dict(sample.get("clocks_khz") or {})
        if isinstance(nominal_khz, Mapping):
            nominal = dict(nominal_khz)
        else:
            nominal = {name: int(nominal_khz) for name in clocks}
        dropped = any(
            clocks.get(name) is not None and clocks[name] < clock_ratio * khz
            for name, khz in nominal.items()
        )
        measured = measured_clocks_khz(sample)
        if nominal and any(khz < clock_ratio * min(nominal.values()) for khz in measured):
            dropped = True
        if dropped:
            reasons.append(INDICATOR_CLOCK_DROP)
    if any(v for v in (sample.get("cooling_states") or {}).values()):
        reasons.append(INDICATOR_COOLING)
    temp = sample.get("temp_c")
    if trip_c is not None and temp is not None and temp >= trip_c:
        reasons.append(INDICATOR_PASSIVE_TRIP)
    return reasons
