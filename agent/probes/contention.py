"""Who else used the CPU: the evidence that tells interference from throttling.

- the worker's CPU time and run-queue wait, summed over its threads from
  ``/proc/<pid>/task/<tid>/schedstat`` (``cpu_ns wait_ns timeslices``; the wait is
  time the thread was runnable but another task had the CPU), read by the worker
  itself at the edges of its timed loop and of each sustained window;

and sampled at 1 Hz by the agent (never the worker) while a worker measures:

- the whole machine's busy, idle and steal time from the ``cpu`` line of ``/proc/stat``;
- the CPU time of every other process since the previous sample, by name (``comm``)
  only: command lines and arguments may hold secrets and are never read.

Parsers are pure and tested on recorded text; :class:`ContentionSampler` reads the
real ``/proc`` (``proc_root``), which a board emulator does not replace: the
processes competing for this machine's CPUs are real.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from ..measure.attribution import declared_ticks_between

log = logging.getLogger(__name__)

# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice.
# guest time is already counted in user and nice, so the total leaves it out.
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_proc_stat(text: str) -> dict:
    """The aggregate ``cpu`` line of /proc/stat: ``{total, busy, idle, steal}`` in clock ticks."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1 : 1 + len(_STAT_FIELDS)]]
            values += [0] * (len(_STAT_FIELDS) - len(values))
            f = dict(zip(_STAT_FIELDS, values))
            total = sum(values)
            idle = f["idle"] + f["iowait"]
            return {"total": total, "busy": total - idle, "idle": idle, "steal": f["steal"]}
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_schedstat(text: str) -> tuple[int, int]:
    """``(cpu_ns, wait_ns)`` from a /proc/<pid>[/task/<tid>]/schedstat line."""
    parts = text.split()
    if len(parts) < 2:
        raise ValueError(f"not a schedstat line: {text!r}")
    return int(parts[0]), int(parts[1])


def parse_pid_stat(text: str) -> tuple[str, int, int]:
    """``(comm, pgrp, utime + stime ticks)`` from /proc/<pid>/stat.

    ``comm`` sits in parentheses and may itself hold spaces and parentheses, so the
    fields are counted from the last ``)``.
    """
    open_ = text.index("(")
    close = text.rindex(")")
    comm = text[open_ + 1 : close]
    rest = text[close + 2 :].split()
    # rest[0] is field 3 (state): pgrp is field 5, utime 14, stime 15.
    return comm, int(rest[2]), int(rest[11]) + int(rest[12])


def _read(path: Path | str) -> str | None:
    # os.open/os.read rather than open(): a sample reads every process's stat file, and
    # the text-mode file object costs several times the read itself.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_worker_schedstat(proc_root: Path, pid: int) -> tuple[int, int] | None:
    """The worker's CPU and run-queue wait (ns) over all its threads; None when unreadable."""
    try:
        tids = os.listdir(proc_root / str(pid) / "task")
    except OSError:
        return None
    cpu = wait = 0
    seen = False
    for tid in tids:
        text = _read(proc_root / str(pid) / "task" / tid / "schedstat")
        if text is None:
            continue
        try:
            c, w = parse_schedstat(text)
        except ValueError:
            continue
        cpu, wait, seen = cpu + c, wait + w, True
    return (cpu, wait) if seen else None


def read_process_ticks(proc_root: Path) -> dict[int, tuple[str, int, int]]:
    """``{pid: (comm, pgrp, cpu ticks)}`` for every process readable now."""
    out = {}
    root = str(proc_root)
    try:
        entries = os.listdir(root)
    except OSError:  # no /proc (macOS): nothing to name
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        text = _read(f"{root}/{entry}/stat")
        if text is None:
            continue
        try:
            out[int(entry)] = parse_pid_stat(text)
        except (ValueError, IndexError):
            continue
    return out


def contention_unmeasurable(proc_root: Path) -> str | None:
    """Why contention cannot be measured under ``proc_root`` (no ``stat`` there, as on
    macOS), or None when it can. Absent evidence is reported as such, never as zero."""
    if _read(Path(proc_root) / "stat") is not None:
        return None
    return (
        f"no {Path(proc_root) / 'stat'} on this machine: other processes' CPU use and the "
        "worker's run-queue wait are not measurable"
    )


# Other processes are listed by name only while they use at least this many CPUs
# between two samples (an idle board costs two small reads a second, not a scan), and
# at most every SCAN_EVERY_S: a scan reads every process's stat file.
SCAN_ABOVE_CPUS = 0.1
SCAN_EVERY_S = 5.0


def _pid_ticks(proc_root: Path, pid: int) -> int | None:
    text = _read(f"{proc_root}/{pid}/stat")
    try:
        return parse_pid_stat(text)[2] if text else None
    except (ValueError, IndexError):
        return None


class ContentionSampler:
    """Samples the machine's CPU use and other processes' CPU at 1 Hz while a worker runs.

    The worker reads its own CPU and run-queue wait at the edges of what it times
    (:func:`read_worker_schedstat` on itself), exactly over the loop or window.

    A sample is ``{"t", "cpu", "agent_ticks", "worker_ticks", "others"}``: ``t``
    CLOCK_MONOTONIC seconds; ``cpu`` the /proc/stat totals (ticks); ``agent_ticks`` and
    ``worker_ticks`` this agent's and the worker's CPU ticks; ``others`` ``{comm: ticks}``
    used from ``others_since`` (the previous scan) to ``t`` by processes outside the
    worker's process group and the agent (only those that used any). Every process is
    read only while the others used at least :data:`SCAN_ABOVE_CPUS` since the previous
    sample, and at most every ``scan_every_s``; the first scan after a quiet spell is a
    baseline, so ``others`` names them from the next scan on. The first sample after
    :meth:`start` and the last at :meth:`stop` bracket the phase. With
    ``declared_pgids`` a sample also holds ``declared`` ``{pid: (pgid, ticks)}``: the
    declared co-load, counted apart from the others.
    """

    def __init__(
        self,
        worker_pid: int,
        proc_root: str | os.PathLike = "/proc",
        interval_s: float = 1.0,
        scan_every_s: float = SCAN_EVERY_S,
        declared_pgids=(),
    ):
        self.proc_root = Path(proc_root)
        # The declared co-load's process groups: their CPU is expected, so it is counted
        # apart (``declared``) and never as other processes'. Their members are the group
        # leaders plus whatever a scan finds in those groups.
        self.declared_pgids = frozenset(declared_pgids)
        self._declared_pids: dict[int, int] = {pgid: pgid for pgid in self.declared_pgids}
        self.worker_pid = worker_pid
        self.interval_s = float(interval_s)
        self.scan_every_s = float(scan_every_s)
        self._scanned_at: float | None = None
        self.clock_ticks_per_s = os.sysconf("SC_CLK_TCK")
        self.cpu_count = os.cpu_count() or 1
        self._agent_pid = os.getpid()
        self._previous: dict[
            int, tuple[str, int, int]
        ] = {}  # the last scan, if the last tick scanned
        self._samples: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _others_cpus(self, last: dict | None, sample: dict) -> float | None:
        """CPUs used by everything but the agent and the worker since ``last``; None if unknown."""
        if not last or not last["cpu"] or not sample["cpu"] or sample["t"] <= last["t"]:
            return None
        ticks = sample["cpu"]["busy"] - last["cpu"]["busy"]
        for key in ("agent_ticks", "worker_ticks"):
            if sample[key] is not None and last[key] is not None:
                ticks -= sample[key] - last[key]
        ticks -= declared_ticks_between(last, sample)
        return ticks / self.clock_ticks_per_s / (sample["t"] - last["t"])

    def sample_once(self, final: bool = False) -> dict:
        """Read everything once now and return the sample (also kept).

        ``final``: the phase's last sample scans whenever a baseline scan exists, so the
        processes of the last seconds are named too.
        """
        now = time.monotonic()
        stat = _read(self.proc_root / "stat")
        sample = {
            "t": now,
            "cpu": parse_proc_stat(stat) if stat else None,
            "agent_ticks": _pid_ticks(self.proc_root, self._agent_pid),
            "worker_ticks": _pid_ticks(self.proc_root, self.worker_pid),
            "others": {},
            "others_since": None,
        }
        if self.declared_pgids:
            sample["declared"] = {
                pid: (pgid, ticks)
                for pid, pgid in list(self._declared_pids.items())
                if (ticks := _pid_ticks(self.proc_root, pid)) is not None
            }
        with self._lock:
            last = self._samples[-1] if self._samples else None
        busy = self._others_cpus(last, sample)
        due = (
            self._scanned_at is None
            or now - self._scanned_at >= self.scan_every_s
            or (final and bool(self._previous))
        )
        if busy is None or (busy >= SCAN_ABOVE_CPUS and due):
            procs = read_process_ticks(self.proc_root)
            for pid, (comm, pgrp, ticks) in procs.items():
                if pgrp in self.declared_pgids:
                    self._declared_pids.setdefault(pid, pgrp)
                    continue
                if pgrp == self.worker_pid or pid == self._agent_pid:
                    continue
                before = self._previous.get(pid)
                # The same pid with no fewer ticks is the same process, whatever its name
                # now (kernel workers rename themselves per work queue, a process may exec
                # or set its name): only what it used since. Fewer ticks is a new process
                # on a reused pid, and all of its ticks are new.
                used = ticks - before[2] if before and ticks >= before[2] else ticks
                if self._previous and used > 0:
                    sample["others"][comm] = sample["others"].get(comm, 0) + used
            if self._previous:
                sample["others_since"] = self._scanned_at
            self._previous, self._scanned_at = procs, now
        elif busy < SCAN_ABOVE_CPUS:
            self._previous, self._scanned_at = {}, None
        with self._lock:
            self._samples.append(sample)
        return sample

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample_once()
            except Exception:  # a sampler must outlive any one bad read
                log.exception("contention sample failed")

    def snapshot(self) -> list[dict]:
        """The samples taken so far (a copy), for a decision while the phase still runs."""
        with self._lock:
            return list(self._samples)

    def start(self) -> None:
        """Take the first sample now, then one every ``interval_s`` on a daemon thread."""
        self.sample_once()
        self._thread = threading.Thread(target=self._run, name="edgequal-contention", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict]:
        """Take a last sample, stop, and return every sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 2.0)
        self.sample_once(final=True)
        return self.samples()

    def samples(self) -> list[dict]:
        """A copy of the samples so far, oldest first."""
        with self._lock:
            return list(self._samples)

    def __enter__(self) -> ContentionSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
