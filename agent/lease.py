"""One measurement at a time: the lease on the device and the slot a run occupies.

A run holds the :class:`RunSlot` from start to signed report; its :class:`Lease`
(run id, holder, start, expiry) is what Info shows and what a second caller is
told when the device is busy. The expiry is enforced: a run still going when its
lease ends is cancelled, and still ends with a signed report.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .errors import DeviceBusy

DEFAULT_MAX_RUN_S = 4 * 3600.0
"""A run still going after this long is cancelled (it ends with a signed report)."""


@dataclass
class Lease:
    """Who holds the device: one qualification, until it ends or its lease expires."""

    run_id: str
    holder: str
    started_unix_ms: int
    expires_unix_ms: int

    def describe(self, now_ms: int | None = None) -> str:
        """One line naming the run, its holder, and its times."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        started_s = max(0, (now_ms - self.started_unix_ms) // 1000)
        left_s = max(0, (self.expires_unix_ms - now_ms) // 1000)
        return (
            f"run {self.run_id} for {self.holder} is in progress "
            f"(started {started_s} s ago, lease expires in {left_s} s)"
        )

    def to_json(self) -> dict:
        """The lease as a JSON object (the keys of the protobuf ``Lease``)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Lease:
        """The inverse of :meth:`to_json`."""
        return cls(
            run_id=str(data["run_id"]),
            holder=str(data["holder"]),
            started_unix_ms=int(data["started_unix_ms"]),
            expires_unix_ms=int(data["expires_unix_ms"]),
        )

    @classmethod
    def starting_now(cls, run_id: str, holder: str, max_run_s: float) -> Lease:
        """A lease from now for ``max_run_s`` seconds."""
        now_ms = int(time.time() * 1000)
        return cls(run_id, holder, now_ms, now_ms + int(max_run_s * 1000))


@dataclass
class ActiveRun:
    """A run in progress: its lease, cancel switch, and the queue feeding its stream."""

    lease: Lease
    cancel: threading.Event = field(default_factory=threading.Event)
    outbox: queue.Queue = field(default_factory=queue.Queue)
    detached: threading.Event = field(default_factory=threading.Event)
    timer: threading.Timer | None = None

    def post_event(self, event: dict) -> None:
        """Forward one progress event to the stream (dropped once the client is gone)."""
        if self.detached.is_set():
            return
        self.outbox.put(("event", json.dumps(event, default=str)))


class RunSlot:
    """The single slot a qualification occupies; a second caller gets DeviceBusy.

    ``on_change`` is called with the new lease (or None) whenever the slot is taken
    or freed, so the agent's state lock can show it to other processes.
    """

    def __init__(self, on_change: Callable[[Lease | None], None] | None = None):
        self._lock = threading.Lock()
        self._run: ActiveRun | None = None
        self._on_change = on_change or (lambda lease: None)

    def start(self, run_id: str, holder: str, max_run_s: float) -> ActiveRun:
        """Take the slot for ``run_id`` or raise DeviceBusy naming the run that holds it."""
        with self._lock:
            if self._run is not None:
                raise DeviceBusy(
                    "device busy: " + self._run.lease.describe(),
                    hint="try again when it ends; its holder can cancel it by run id",
                )
            run = ActiveRun(Lease.starting_now(run_id, holder, max_run_s))
            # The lease is enforced, not just shown: an overrun is cancelled and still reported.
            run.timer = threading.Timer(max_run_s, run.cancel.set)
            run.timer.daemon = True
            run.timer.start()
            self._run = run
            self._on_change(run.lease)
            return run

    def finish(self, run: ActiveRun) -> None:
        """Free the slot held by ``run``."""
        if run.timer is not None:
            run.timer.cancel()
        with self._lock:
            if self._run is run:
                self._run = None
                self._on_change(None)

    def current(self) -> ActiveRun | None:
        """The run holding the device, if any."""
        with self._lock:
            return self._run
