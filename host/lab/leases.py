"""A fleet run's hold on a board's lease: what a run waits for, in words (the lease, who
holds it, the place in line), and the renewal that keeps it while the run goes on. Used by
the fleet's cells and by the library's ``Device.lease``."""

from __future__ import annotations

import logging
import threading

from ..errors import HostError
from ..transport import Transport

log = logging.getLogger(__name__)


def waiting_text(device: str, wait: dict) -> str:
    """What a run waits for, from an ``acquire_lease`` wait: the lease, who holds it and
    when it is likely free, the place in line."""
    from edgequal.contract.lease import Lease

    lease = wait.get("lease")
    held = Lease.from_json(lease).describe() if lease else "others are ahead in line"
    place = f", place {wait['position']} in line" if wait.get("position") is not None else ""
    return f"the lease of {device}{place}: {held}"


def first_waiting_text(transport, device: str) -> str | None:
    """What a run waits for before the device's first answer in line (which may take a
    few seconds): the lease of ``device`` and who holds it now (its Info), or None when no
    one does: a free board is taken at once, and nothing is waited for (the device's own
    answer says so if another host takes it first)."""
    try:
        lease = (transport.info() or {}).get("lease")
    except HostError:  # the wait itself will say
        lease = None
    return waiting_text(device, {"lease": lease}) if lease else None


class LeaseKeeper:
    """Renews a transport's lease every third of its TTL until stopped."""

    def __init__(self, transport: Transport, ttl_s: float):
        self.transport = transport
        self.ttl_s = ttl_s
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="lease-renew")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.transport.renew_lease(self.ttl_s)
            except HostError as e:  # the run still ends; the next one takes a fresh lease
                self.lost = str(e)
                log.warning("lease renewal failed: %s", e)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
