"""Declared co-load, run inside a ``coload`` worker: a model in a loop, or a synthetic CPU or
memory-bandwidth load (docs/measurement.md "Co-load").

Each loop reports a running total every ``report_every_s`` (``report(count)``): model
inferences, CPU seconds of this process, or bytes copied. The agent turns those into
the co-load's achieved rate over the spans it ran (``measure.coload.achieved``). The
agent pauses and resumes the whole process with SIGSTOP and SIGCONT: a fixed-rate loop
does not try to catch up what a pause cost (no burst after a resume). A loop runs
until ``stop()`` says so (SIGTERM) or the agent kills its process group.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

DUTY_PERIOD_S = 0.02
"""A CPU or memory load of a share below one core is busy this period times the share, then sleeps."""


def model_loop(
    call: Callable[[], object],
    rate_per_s: float | None,
    report: Callable[[float], None],
    stop: Callable[[], bool],
    report_every_s: float,
) -> None:
    """Run ``call`` back to back (``rate_per_s`` None: a closed loop) or at a fixed rate."""
    clock = time.perf_counter
    period = 1.0 / rate_per_s if rate_per_s else 0.0
    count = 0
    next_call = next_report = clock()
    while not stop():
        if period:
            now = clock()
            if now < next_call:
                time.sleep(next_call - now)
            # After a pause (SIGSTOP) or an overrun, start again from now: no burst.
            next_call = max(next_call + period, clock() - period)
        call()
        count += 1
        if clock() >= next_report:
            report(count)
            next_report = clock() + report_every_s


def cpu_loop(
    share: float, report: Callable[[float], None], stop: Callable[[], bool], report_every_s: float
) -> None:
    """Keep one core busy ``share`` of the time; reports this process's CPU seconds."""
    _duty_loop(lambda: None, share, lambda: time.process_time(), report, stop, report_every_s)


def membw_loop(
    share: float,
    buffer_mb: int,
    report: Callable[[float], None],
    stop: Callable[[], bool],
    report_every_s: float,
) -> None:
    """Copy between two ``buffer_mb`` buffers (past the caches) ``share`` of the time; reports bytes."""
    n = buffer_mb * (1 << 20) // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    # A copy of the whole buffer takes milliseconds on a board: copy in slices so the
    # duty cycle and the stop request are honoured within a period.
    step = max(1, min(n, (1 << 20) // 8))
    copied = 0
    position = 0

    def one_slice() -> None:
        nonlocal copied, position
        end = min(n, position + step)
        np.copyto(dst[position:end], src[position:end])
        copied += (end - position) * 8 * 2  # read plus write
        position = 0 if end == n else end

    _duty_loop(one_slice, share, lambda: copied, report, stop, report_every_s)


def _duty_loop(work, share, total, report, stop, report_every_s) -> None:
    clock = time.perf_counter
    busy_s = DUTY_PERIOD_S * min(1.0, share)
    next_report = clock()
    while not stop():
        period_start = clock()
        while clock() - period_start < busy_s:
            work()
        if share < 1.0:
            rest = DUTY_PERIOD_S - (clock() - period_start)
            if rest > 0:
                time.sleep(rest)
        if clock() >= next_report:
            report(total())
            next_report = clock() + report_every_s
