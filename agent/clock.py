"""The device's wall clock, checked against the host's, and the boot it belongs to.

Boards without a real-time clock (most Raspberry Pis) boot in 1970 or at the
last saved time and keep it until NTP answers; a lab board may never reach NTP.
Nothing that decides a report's validity reads the device's clock (durations
are monotonic, verification checks a signature, a nonce and digests), but the
dates a report carries (``finished_at``, the run id) come from it, so the report
says whether they can be believed:

- The host writes its own time into the nonce it issues (:func:`new_nonce`:
  ``<32 hex>.<host unix ms>``). The nonce is fresh, random and echoed in the
  signed report, so the host that checks it also knows the time it issued it.
- At run start the agent compares its clock with that reference
  (:func:`check_clock`); more than :data:`MAX_OFFSET_S` apart is
  ``clock_unsynced``. A nonce without a time (an older host, a hand-written
  plan) is checked against :data:`CLOCK_FLOOR_UNIX` only: a clock before it is
  certainly wrong.

The boot id (``/proc/sys/kernel/random/boot_id``, under the probe root) tells
whether the device restarted between two moments: a run recorded under one boot
id and recovered under another was cut by a reboot (``device_reboot``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from edgequal.contract.nonce import nonce_time_unix_ms

from .probes.fingerprint import BOOT_ID
from .probes.sysfs import read_value, under

MAX_OFFSET_S = 300.0
"""How far device and host clocks may differ before the report is flagged: far above
network and push delays, far below the error of a board that never synchronized."""

CLOCK_FLOOR_UNIX = 1_735_689_600
"""2025-01-01T00:00:00Z: no correct clock reads earlier on a device running this agent."""


@dataclass(frozen=True)
class ClockCheck:
    """The device clock at run start, the reference it was compared with, and the verdict."""

    device_unix_ms: int
    reference_unix_ms: int | None
    basis: str  # "host_nonce" or "floor"
    synced: bool

    @property
    def offset_s(self) -> float | None:
        """Device minus host, in seconds (negative: the device is behind); None without a host time."""
        if self.reference_unix_ms is None:
            return None
        return (self.device_unix_ms - self.reference_unix_ms) / 1000

    def to_json(self) -> dict:
        """The report's ``clock`` section."""
        return {
            "device_unix_ms": self.device_unix_ms,
            "reference_unix_ms": self.reference_unix_ms,
            "offset_s": self.offset_s,
            "basis": self.basis,
            "synced": self.synced,
        }

    def finding(self) -> dict | None:
        """A ``clock_unsynced`` finding when the clock cannot be believed, else None."""
        if self.synced:
            return None
        device = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.device_unix_ms / 1000))
        if self.offset_s is not None:
            how = f"{abs(self.offset_s):.0f} s {'behind' if self.offset_s < 0 else 'ahead of'} the host's"
        else:
            how = "before this agent was written"
        return {
            "kind": "clock_unsynced",
            "message": f"the device clock read {device}, {how}: dates in this report "
            "(finished_at, the run id) come from it and are wrong; durations and the "
            "signature are not affected",
        }


def check_clock(device_unix_s: float, nonce: str | None) -> ClockCheck:
    """Compare the device clock with the host time in ``nonce`` (else with the floor)."""
    device_ms = int(device_unix_s * 1000)
    reference = nonce_time_unix_ms(nonce) if nonce else None
    if reference is not None:
        synced = abs(device_ms - reference) <= MAX_OFFSET_S * 1000
        return ClockCheck(device_ms, reference, "host_nonce", synced)
    return ClockCheck(device_ms, None, "floor", device_unix_s >= CLOCK_FLOOR_UNIX)


def read_boot_id(root: Path = Path("/")) -> str | None:
    """This boot's id (a UUID the kernel draws at boot), or None where it cannot be read."""
    return read_value(under(root, BOOT_ID))
