"""One measurement at a time: the lease on the device and the slot a run occupies.

A host takes the device with :meth:`RunSlot.acquire` (holder, purpose, time to
live), renews it while it works and releases it; a qualification under that lease
names it, and nobody else's can start. A lease not renewed in time is reclaimed by
the next caller (never while its run is still going). Hosts that wait are served in
order of arrival: each waiting host holds a ticket, its place in line, for as long
as it keeps asking. A qualification that names no lease takes the device for that
run alone when nobody holds or waits for it (the one-run-at-a-time slot of before).

A run holds the slot from start to signed report; its :class:`Lease` (run id,
holder, start, expiry) is what Info shows and what a second caller is told when
the device is busy. The run's expiry is enforced: a run still going when its lease
ends is cancelled, and still ends with a signed report.

Expiry is kept on the monotonic clock: a step of the device's wall clock (NTP
arriving on a board without RTC, an operator's ``date -s``) neither hands a live
lease to another host nor keeps a dead host's lease for a day. The wall-clock
times a :class:`Lease` carries are only shown: they are computed from the wall
clock when asked, so they read right even after a step.
"""

from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edgequal.contract.errors import DeviceBusy
from edgequal.contract.lease import Lease

log = logging.getLogger(__name__)

DEFAULT_MAX_RUN_S = 4 * 3600.0
"""A run still going after this long is cancelled (it ends with a signed report)."""
MAX_LEASE_TTL_S = DEFAULT_MAX_RUN_S
"""The longest a lease lasts without renewal."""
MAX_WAIT_PER_CALL_S = 5.0
"""The longest one Acquire call waits; a host waiting longer calls again with its ticket."""
TICKET_GRACE_S = 20.0
"""A waiting host that has not asked again for this long loses its place in line."""


@dataclass
class ActiveRun:
    """A run in progress: its lease, cancel switch, and the queue feeding its stream.

    ``lease`` names the run and its holder (its wall times are those of the start);
    ``started_mono`` and ``deadline_mono`` are when it started and is cancelled, on
    the monotonic clock.
    """

    lease: Lease
    started_mono: float = field(default_factory=time.monotonic)
    deadline_mono: float = float("inf")
    cancel: threading.Event = field(default_factory=threading.Event)
    outbox: queue.Queue = field(default_factory=queue.Queue)
    detached: threading.Event = field(default_factory=threading.Event)
    timer: threading.Timer | None = None

    def post_event(self, event: dict) -> None:
        """Forward one progress event to the stream (dropped once the client is gone)."""
        if self.detached.is_set():
            return
        self.outbox.put(("event", json.dumps(event, default=str)))


@dataclass
class HeldLease:
    """A lease a host holds: its secret id (only the holder knows it), holder, purpose, times.

    ``acquired_mono`` and ``expires_mono`` are on the monotonic clock; expiry is decided
    on them alone.
    """

    lease_id: str
    holder: str
    purpose: str
    acquired_mono: float
    expires_mono: float

    def expired(self, now_mono: float | None = None) -> bool:
        """Whether the lease ran out without renewal."""
        now_mono = time.monotonic() if now_mono is None else now_mono
        return now_mono >= self.expires_mono

    def public(self, wall_now_s: float, now_mono: float | None = None) -> Lease:
        """What others may see: the lease without its id (no run yet), in wall-clock times
        computed from ``wall_now_s``."""
        now_mono = time.monotonic() if now_mono is None else now_mono
        return Lease(
            "",
            self.holder,
            _wall_ms(wall_now_s, now_mono, self.acquired_mono),
            _wall_ms(wall_now_s, now_mono, self.expires_mono),
            self.purpose,
        )


def _wall_ms(wall_now_s: float, now_mono: float, at_mono: float) -> int:
    """The wall-clock time (unix ms) of the monotonic instant ``at_mono``, as shown now."""
    return int((wall_now_s + (at_mono - now_mono)) * 1000)


@dataclass
class AcquireResult:
    """What an Acquire call ends with: the lease granted, or the ticket and place in line.

    ``current`` is the lease that holds the device (the granted one when ``granted``).
    """

    granted: bool
    lease_id: str
    ticket: str
    position: int
    current: Lease | None


@dataclass
class _Waiter:
    ticket: str
    holder: str
    last_seen: float


def _check_ttl(ttl_s: float) -> float:
    from edgequal.contract.errors import BadInput

    if not 1.0 <= float(ttl_s) <= MAX_LEASE_TTL_S:
        raise BadInput(f"a lease lasts 1 to {MAX_LEASE_TTL_S:g} s, not {ttl_s:g}")
    return float(ttl_s)


class RunSlot:
    """The device lease and the single slot a qualification occupies.

    ``on_change`` is called with the lease to show (or None) whenever the device is
    taken or freed, so the agent's state lock can show it to other processes.
    ``wall_clock`` is the device's wall clock in unix seconds (``time.time``): it only
    dates what is shown; expiry runs on ``time.monotonic``.
    """

    def __init__(
        self,
        on_change: Callable[[Lease | None], None] | None = None,
        *,
        ticket_grace_s: float = TICKET_GRACE_S,
        wall_clock: Callable[[], float] = time.time,
    ):
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._run: ActiveRun | None = None
        self._held: HeldLease | None = None
        self._waiters: list[_Waiter] = []
        self._ticket_grace_s = ticket_grace_s
        self._on_change = on_change or (lambda lease: None)

    # -- under the lock ----------------------------------------------------------

    def _shown(self) -> Lease | None:
        now_mono, wall = time.monotonic(), self._wall_clock()
        if self._run is not None:
            run = self._run
            started_ms = _wall_ms(wall, now_mono, run.started_mono)
            planned_ms = run.lease.expected_end_unix_ms - run.lease.started_unix_ms
            return Lease(
                run.lease.run_id,
                run.lease.holder,
                started_ms,
                _wall_ms(wall, now_mono, run.deadline_mono),
                run.lease.purpose,
                started_ms + planned_ms if run.lease.expected_end_unix_ms else 0,
            )
        return self._held.public(wall, now_mono) if self._held is not None else None

    def _describe(self, lease: Lease) -> str:
        return lease.describe(int(self._wall_clock() * 1000))

    def _reclaim(self) -> None:
        """Drop an expired lease (never while its run goes on) and waiters that stopped asking."""
        if self._held is not None and self._run is None and self._held.expired():
            log.warning(
                "lease of %s (%s) expired without renewal; reclaimed",
                self._held.holder,
                self._held.purpose or "no purpose given",
            )
            self._held = None
            self._on_change(None)
            self._changed.notify_all()
        now = time.monotonic()
        self._waiters = [w for w in self._waiters if now - w.last_seen < self._ticket_grace_s]

    def _busy_error(self, prefix: str = "device busy: ") -> DeviceBusy:
        shown = self._shown()
        return DeviceBusy(
            prefix + (self._describe(shown) if shown else f"{len(self._waiters)} host(s) waiting"),
            hint="wait for it (--wait), or try again when it ends",
        )

    # -- leases ------------------------------------------------------------------

    def acquire(
        self,
        holder: str,
        purpose: str,
        ttl_s: float,
        *,
        wait_s: float = 0.0,
        ticket: str = "",
    ) -> AcquireResult:
        """Take the lease, waiting up to ``wait_s`` (at most MAX_WAIT_PER_CALL_S) in line.

        ``wait_s == 0`` fails fast: DeviceBusy naming the holder and the expiry. When the
        wait ends first, the result is not granted and carries the caller's ``ticket``
        and place in line; asking again with the ticket keeps that place.
        """
        ttl_s = _check_ttl(ttl_s)
        wait_s = min(max(0.0, float(wait_s)), MAX_WAIT_PER_CALL_S)
        deadline = time.monotonic() + wait_s
        with self._lock:
            self._reclaim()
            waiter = next((w for w in self._waiters if ticket and w.ticket == ticket), None)
            if waiter is None:
                if wait_s == 0 and (self._run or self._held or self._waiters):
                    raise self._busy_error()
                waiter = _Waiter(secrets.token_urlsafe(12), holder, time.monotonic())
                self._waiters.append(waiter)
            while True:
                waiter.last_seen = time.monotonic()
                if self._run is None and self._held is None and self._waiters[0] is waiter:
                    self._waiters.pop(0)
                    now_mono = time.monotonic()
                    self._held = HeldLease(
                        secrets.token_urlsafe(16), holder, purpose, now_mono, now_mono + ttl_s
                    )
                    shown = self._shown()
                    self._on_change(shown)
                    log.info("lease granted to %s (%s) for %g s", holder, purpose or "-", ttl_s)
                    return AcquireResult(True, self._held.lease_id, "", 0, shown)
                left = deadline - time.monotonic()
                if left <= 0:
                    if wait_s == 0:
                        self._waiters.remove(waiter)
                        raise self._busy_error()
                    return AcquireResult(
                        False, "", waiter.ticket, self._waiters.index(waiter) + 1, self._shown()
                    )
                if self._held is not None and self._run is None:
                    # Wake when the holder's lease runs out, to reclaim it.
                    left = min(left, max(0.01, self._held.expires_mono - time.monotonic()))
                self._changed.wait(left)
                self._reclaim()
                if waiter not in self._waiters:  # cannot happen while we ask, but never hang
                    self._waiters.append(waiter)

    def renew(self, lease_id: str, ttl_s: float) -> Lease:
        """Extend the lease ``lease_id`` to ``ttl_s`` from now; DeviceBusy when it is not held."""
        ttl_s = _check_ttl(ttl_s)
        with self._lock:
            self._reclaim()
            if self._held is None or not secrets.compare_digest(self._held.lease_id, lease_id):
                raise self._busy_error("lease not held (it expired or was released); device: ")
            self._held.expires_mono = time.monotonic() + ttl_s
            shown = self._shown()
            self._on_change(shown)
            return shown

    def release(self, lease_id: str) -> bool:
        """Give the lease back (its run, if any, goes on); False when it was not held."""
        with self._lock:
            if self._held is None or not secrets.compare_digest(self._held.lease_id, lease_id):
                return False
            log.info("lease of %s released", self._held.holder)
            self._held = None
            self._on_change(self._shown())
            self._changed.notify_all()
            return True

    def lease(self) -> Lease | None:
        """What holds the device: the run in progress, else the held lease, else None."""
        with self._lock:
            self._reclaim()
            return self._shown()

    # -- runs --------------------------------------------------------------------

    def start(
        self,
        run_id: str,
        holder: str,
        max_run_s: float,
        lease_id: str = "",
        expected_s: float | None = None,
    ) -> ActiveRun:
        """Take the slot for ``run_id`` or raise DeviceBusy naming what holds the device.

        With ``lease_id`` the run goes under that lease, which must be held; without
        it the device must be free and nobody waiting for it. ``expected_s`` is how long
        the run's plan likely takes (shown to whoever finds the device busy).
        """
        with self._lock:
            self._reclaim()
            if self._run is not None:
                raise DeviceBusy(
                    "device busy: " + self._describe(self._shown()),
                    hint="try again when it ends; its holder can cancel it by run id",
                )
            held = self._held
            if lease_id:
                if held is None or not secrets.compare_digest(held.lease_id, lease_id):
                    raise self._busy_error("lease not held (it expired or was released); device: ")
                holder, purpose = held.holder, held.purpose
            elif held is not None or self._waiters:
                raise self._busy_error()
            else:
                purpose = ""
            run = ActiveRun(
                Lease.starting_now(run_id, holder, max_run_s, self._wall_clock(), expected_s)
            )
            run.deadline_mono = run.started_mono + max_run_s
            run.lease.purpose = purpose
            # The lease is enforced, not just shown: an overrun is cancelled and still reported.
            run.timer = threading.Timer(max_run_s, run.cancel.set)
            run.timer.daemon = True
            run.timer.start()
            self._run = run
            self._on_change(self._shown())
            return run

    def finish(self, run: ActiveRun) -> None:
        """Free the slot held by ``run`` (the lease it ran under stays with its holder)."""
        if run.timer is not None:
            run.timer.cancel()
        with self._lock:
            if self._run is run:
                self._run = None
                self._on_change(self._shown())
                self._changed.notify_all()

    def current(self) -> ActiveRun | None:
        """The run holding the device, if any."""
        with self._lock:
            return self._run
