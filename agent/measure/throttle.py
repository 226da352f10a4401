"""Which of a telemetry sample's readings count as throttling: the one throttle rule
(measurement.md §6.4), pure over the sample dicts the agent's sampler records
(``probes/telemetry.py``) and the parsed firmware flags of a Raspberry Pi
(``probes/raspberry_pi.py`` ``parse_throttled``). The sustained score and the attribution
of slow windows read it; nothing here reads a file or runs a command.
"""

from __future__ import annotations

from collections.abc import Mapping

from edgequal.contract.plan import (
    INDICATOR_CLOCK_DROP,
    INDICATOR_COOLING,
    INDICATOR_PASSIVE_TRIP,
    INDICATOR_PI_FLAGS,
)


def throttle_active(flags: dict | None) -> bool:
    """True when a performance-limiting bit is set *now* (frequency capped, throttled, soft limit).

    Under-voltage (bit 0) is reported separately: it is a failure of its own.
    """
    if not flags:
        return False
    now = flags["now"]
    return now["freq_capped"] or now["throttled"] or now["soft_temp_limit"]


def throttle_reasons(
    sample: Mapping,
    *,
    trip_c: float | None = None,
    nominal_khz: Mapping[str, int] | int | None = None,
    clock_ratio: float = 0.97,
) -> list[str]:
    """The throttle indicators that fire in one sample (measurement.md §6.4). Pure.

    - ``get_throttled``: a Pi firmware bit 1, 2 or 3 is set now;
    - ``clock_drop``: a measured clock is below ``clock_ratio`` x nominal (per policy when
      ``nominal_khz`` is a mapping; the Pi's ``arm_clock_khz`` is compared with the
      smallest nominal when given one);
    - ``cooling_device``: a CPU-throttling cooling device has ``cur_state > 0``;
    - ``passive_trip``: ``temp_c`` has reached ``trip_c``.

    Under-voltage is not a throttle indicator here; read ``throttled["now"]["under_voltage"]``.
    """
    reasons = []
    if throttle_active(sample.get("throttled")):
        reasons.append(INDICATOR_PI_FLAGS)
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
        arm = sample.get("arm_clock_khz")
        if arm is not None and nominal and arm < clock_ratio * min(nominal.values()):
            dropped = True
        if dropped:
            reasons.append(INDICATOR_CLOCK_DROP)
    if any(v for v in (sample.get("cooling_states") or {}).values()):
        reasons.append(INDICATOR_COOLING)
    temp = sample.get("temp_c")
    if trip_c is not None and temp is not None and temp >= trip_c:
        reasons.append(INDICATOR_PASSIVE_TRIP)
    return reasons
