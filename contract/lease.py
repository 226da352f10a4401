"""Who holds a device: the lease record an agent grants and a host reads (Info, Acquire, busy
errors), in one typed form with its JSON and its one-line description."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass


@dataclass
class Lease:
    """Who holds the device: one qualification, until it ends or its lease expires."""

    run_id: str
    holder: str
    started_unix_ms: int
    expires_unix_ms: int
    purpose: str = ""
    """What the holder took the device for (``fleet run bench``); empty when not said."""
    expected_end_unix_ms: int = 0
    """When the run's plan is likely done (its start plus :meth:`Plan.timed_s`); 0 unknown."""

    def describe(self, now_ms: int | None = None) -> str:
        """One line naming the run (or the lease without a run), its holder, and when the
        device is likely free: for a run, from its plan's timed phases (the lease's own
        expiry is the run's upper limit, hours away, and says little)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if not self.run_id:
            started_s = max(0, (now_ms - self.started_unix_ms) // 1000)
            left_s = max(0, (self.expires_unix_ms - now_ms) // 1000)
            purpose = f" for {self.purpose}" if self.purpose else ""
            return (
                f"leased to {self.holder}{purpose} "
                f"(since {started_s} s ago, lease expires in {left_s} s)"
            )
        return f"run {self.run_id} for {self.holder} is in progress ({self.timing(now_ms)})"

    def timing(self, now_ms: int | None = None) -> str:
        """When a run started and when it is likely done: ``started 12 s ago; its plan
        times 75 s: likely free in about 63 s``."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        started_s = max(0, (now_ms - self.started_unix_ms) // 1000)
        head = f"started {started_s} s ago"
        if not self.expected_end_unix_ms:
            left_s = max(0, (self.expires_unix_ms - now_ms) // 1000)
            return f"{head}; how long its plan takes is not known, at most {left_s} s"
        planned_s = max(0, (self.expected_end_unix_ms - self.started_unix_ms) // 1000)
        free_s = (self.expected_end_unix_ms - now_ms) // 1000
        if free_s > 0:
            return f"{head}; its plan times {planned_s} s: likely free in about {free_s} s"
        return f"{head}; its plan's {planned_s} s of timed phases are over: likely free soon"

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
            purpose=str(data.get("purpose") or ""),
            expected_end_unix_ms=int(data.get("expected_end_unix_ms") or 0),
        )

    @classmethod
    def starting_now(
        cls,
        run_id: str,
        holder: str,
        max_run_s: float,
        wall_now_s: float | None = None,
        expected_s: float | None = None,
    ) -> Lease:
        """A lease from now (``wall_now_s``, else ``time.time()``) for ``max_run_s`` seconds;
        the run likely ends after ``expected_s`` (its plan's timed phases)."""
        now_ms = int((time.time() if wall_now_s is None else wall_now_s) * 1000)
        end = now_ms + int(min(expected_s, max_run_s) * 1000) if expected_s is not None else 0
        return cls(run_id, holder, now_ms, now_ms + int(max_run_s * 1000), "", end)
