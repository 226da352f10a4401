"""Runs one worker job in a child process and turns every way it can end into a result.

The child is started with exec (never a bare fork of a process that may hold gRPC
threads), in its own process group, so a timeout kills the runtime's threads and any
helpers with it. A crash (signal), hang (phase timeout) or memory kill becomes a
``WorkerOutcome`` naming the phase and the cause; the caller never dies with it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..runtimes import child_env

STDERR_TAIL_LINES = 20

DEFAULT_MEMORY_FRACTION = 0.5
"""A worker may use this share of the board's memory (MemTotal) unless the plan or the
operator says otherwise: on a 1 GB board the OS, the agent and the page cache keep the
other half, so an oversized model is a ``memory`` finding, not the kernel's OOM killer."""


def default_memory_limit_mb(root: Path = Path("/")) -> int | None:
    """:data:`DEFAULT_MEMORY_FRACTION` of the board's MemTotal (``/proc/meminfo`` under
    ``root``) in MiB; None where the board's memory cannot be read."""
    from ..probes.fingerprint import MEMINFO, parse_meminfo_kb
    from ..probes.sysfs import read_text, under

    total_kb = parse_meminfo_kb(read_text(under(root, MEMINFO)))
    if not total_kb:
        return None
    return max(1, int(total_kb * DEFAULT_MEMORY_FRACTION) // 1024)


@dataclass
class WorkerOutcome:
    """How a worker job ended: ``ok`` with a result, or a failure with phase and cause."""

    ok: bool
    result: dict | None = None
    error: dict | None = None  # {"type", "message", "hint"?, "operator"?}
    phase: str | None = None  # the phase running when it ended
    cause: str | None = None  # "error" | "signal" | "timeout" | "memory" | "exit" | "cancelled"
    returncode: int | None = None  # None: the process lives on (kept after its result)
    stderr_tail: list[str] = field(default_factory=list)
    pid: int | None = None
    result_ms: float | None = None  # from the start (or resume) to the result event

    def describe(self) -> str:
        """One line: what failed, in which phase, and why."""
        if self.ok:
            return "ok"
        where = f" during {self.phase}" if self.phase else ""
        message = (self.error or {}).get("message", "")
        return f"{self.cause}{where}: {message}".strip()


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class Worker:
    """One worker child process running one job.

    ``phase_timeout_s`` bounds each phase (the clock restarts at every phase event);
    ``memory_limit_mb`` is enforced from outside by polling the child's RSS every
    0.1 s (RLIMIT_AS would also count the address space runtimes reserve but never
    touch, and fails their imports), and on the high-water mark its result reports, so a
    peak between two polls still counts; ``on_event`` sees every event as it arrives.
    ``python`` is the interpreter to exec (a runtime environment's, ``runtimes/envs.py``;
    default the agent's own).
    """

    def __init__(
        self,
        job: dict,
        phase_timeout_s: float = 300.0,
        memory_limit_mb: int | None = None,
        on_event: Callable[[dict], None] | None = None,
        cancel: threading.Event | None = None,
        env: dict | None = None,
        python: str | None = None,
    ):
        self.job = dict(job)
        self.python = python or sys.executable
        self.phase_timeout_s = phase_timeout_s
        self.memory_limit_mb = memory_limit_mb
        self.on_event = on_event or (lambda e: None)
        self.cancel = cancel or threading.Event()
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Exec the worker and send it the job."""
        self._t_start = time.perf_counter()
        self.proc = subprocess.Popen(
            [self.python, "-m", "edgequal.agent.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            env=child_env(self.env),
        )
        self._events: queue.Queue = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        try:
            self.proc.stdin.write((json.dumps(self.job) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the child died at once; wait() reports how

    def send(self, message: dict) -> bool:
        """Write one more JSON line to the worker's stdin (a job that takes commands);
        False when the worker is gone."""
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return False
        return True

    @property
    def pid(self) -> int | None:
        """The worker's pid (also its process group id)."""
        return self.proc.pid if self.proc else None

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            try:
                self._events.put(json.loads(line))
            except ValueError:
                self._stderr.append(line.decode(errors="replace").rstrip())
        self._events.put(None)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line.decode(errors="replace").rstrip())

    def kill(self) -> None:
        """Kill the worker's whole process group (SIGCONT first, in case it was stopped)."""
        if self.proc and self.proc.poll() is None:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    pass

    def request_stop(self) -> None:
        """Ask a sustained run to end early and report what it has (SIGTERM)."""
        if self.proc and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def add_window(self) -> None:
        """Ask a sustained run for one window more than planned (SIGUSR1), to replace a
        window that interference took."""
        if self.proc and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass

    def resume(self, job: dict, phase_timeout_s: float, on_event=None) -> bool:
        """Give a worker kept after its result (``WorkerJob.keep``, :meth:`wait`'s ``stay``)
        its next job, under that job's phase timeout and event sink; :meth:`wait` follows
        it. False when the worker is gone."""
        self.job, self.phase_timeout_s = dict(job), phase_timeout_s
        self.on_event = on_event or (lambda e: None)
        self._t_start = time.perf_counter()
        return self.send(self.job)

    def end(self) -> None:
        """End a kept worker that gets no next job: close its stdin, then its group."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self.kill()
        self.proc.wait()

    def wait(self, stay: bool = False) -> WorkerOutcome:
        """Follow events until the worker ends; returns the outcome, never raises for worker
        trouble. ``stay``: return at the job's result, the process kept for its next job
        (:meth:`resume`; :meth:`end` when there is none)."""
        phase = "start"
        deadline = time.monotonic() + self.phase_timeout_s
        result = error = result_ms = None
        cause = peak_mb = None
        while True:
            if self.cancel.is_set() and cause is None:
                cause = "cancelled"
                self.kill()
            if cause is None and self.memory_limit_mb and self._rss_mb() > self.memory_limit_mb:
                cause = "memory"
                self.kill()
            try:
                event = self._events.get(timeout=0.1)
            except queue.Empty:
                if cause is None and time.monotonic() > deadline:
                    cause = "timeout"
                    self.kill()
                continue
            if event is None:
                break
            kind = event.get("event")
            if kind == "phase":
                phase = event["phase"]
                deadline = time.monotonic() + self.phase_timeout_s
            elif kind == "result":
                result = event["result"]
                result_ms = (time.perf_counter() - self._t_start) * 1e3
                # A peak between two polls (a call that allocated and freed within 0.1 s)
                # is over the limit all the same: the worker's own high-water mark says so.
                if cause is None and self._peak_over_limit(result):
                    cause, peak_mb = "memory", result["peak_rss_bytes"] / (1 << 20)
                if stay and cause is None:  # kept: no exit
                    self.on_event(event)
                    outcome = self._outcome(True, None, None, result_ms)
                    outcome.result = result
                    return outcome
            elif kind == "error":
                error = event["error"]
            self.on_event(event)
        returncode = self.proc.wait()
        self.kill()  # leftovers in the group (helpers a runtime spawned)
        outcome = self._outcome(False, phase, returncode, result_ms)
        if result is not None and cause is None:
            outcome.ok, outcome.result, outcome.phase = True, result, None
        elif error is not None and cause is None:
            outcome.cause, outcome.error = "error", error
        elif cause == "timeout":
            outcome.cause = "timeout"
            outcome.error = {
                "type": "Timeout",
                "message": f"no progress for {self.phase_timeout_s:g} s in phase {phase}; worker killed",
            }
        elif cause == "memory":
            outcome.cause = "memory"
            done = "killed" if peak_mb is None else f"its peak was {peak_mb:.0f} MB"
            outcome.error = {
                "type": "MemoryLimit",
                "message": f"worker exceeded the {self.memory_limit_mb} MB memory limit; {done}",
            }
        elif cause == "cancelled":
            outcome.cause = "cancelled"
            outcome.error = {"type": "Cancelled", "message": "run cancelled"}
        elif returncode < 0:
            name = _signal_name(-returncode)
            note = (
                " (possibly the kernel's out-of-memory killer)"
                if returncode == -signal.SIGKILL
                else ""
            )
            outcome.cause = "signal"
            outcome.error = {
                "type": "Crash",
                "message": f"worker killed by {name}{note}",
                "signal": name,
            }
        else:
            last = self._stderr[-1] if self._stderr else "no output"
            outcome.cause = "exit"
            outcome.error = {
                "type": "Crash",
                "message": f"worker exited with code {returncode}: {last}",
            }
        return outcome

    def _outcome(self, ok, phase, returncode, result_ms) -> WorkerOutcome:
        """The outcome's fields every ending shares (the result is set where it is one)."""
        return WorkerOutcome(
            ok=ok,
            phase=phase,
            returncode=returncode,
            stderr_tail=list(self._stderr),
            pid=self.proc.pid,
            result_ms=result_ms,
        )

    def _peak_over_limit(self, result) -> bool:
        """Whether a result's ``peak_rss_bytes`` (the worker's VmHWM) passed the limit."""
        peak = result.get("peak_rss_bytes") if isinstance(result, dict) else None
        return bool(self.memory_limit_mb and peak and peak / (1 << 20) > self.memory_limit_mb)

    def _rss_mb(self) -> float:
        from ..probes.memory import read_rss_bytes

        try:
            return read_rss_bytes(self.proc.pid) / (1 << 20)
        except Exception:  # the worker is gone (psutil.NoSuchProcess): nothing to limit
            return 0.0


def run_job(job: dict, **kwargs) -> WorkerOutcome:
    """Start a worker for ``job`` and wait for its outcome."""
    worker = Worker(job, **kwargs)
    worker.start()
    return worker.wait()
