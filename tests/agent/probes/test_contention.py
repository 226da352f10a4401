"""The contention probe: pure parsers on recorded /proc text, and the sampler on this machine's /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from edgequal.agent.probes.contention import (
    ContentionSampler,
    contention_unmeasurable,
    parse_pid_stat,
    parse_proc_stat,
    parse_schedstat,
    read_worker_schedstat,
)

PROC_STAT = """cpu  12318 7 3281 44533 489 3 89 25 0 0
cpu0 6000 3 1600 22000 200 1 40 12 0 0
intr 123 4 5
"""


def test_parse_proc_stat_totals_busy_idle_and_steal():
    cpu = parse_proc_stat(PROC_STAT)
    # total = user+nice+system+idle+iowait+irq+softirq+steal (guest is inside user)
    assert cpu["total"] == 12318 + 7 + 3281 + 44533 + 489 + 3 + 89 + 25
    assert cpu["idle"] == 44533 + 489
    assert cpu["busy"] == cpu["total"] - cpu["idle"]
    assert cpu["steal"] == 25


def test_parse_proc_stat_without_steal_columns_and_without_the_cpu_line():
    assert parse_proc_stat("cpu  10 0 5 100\n")["steal"] == 0
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1 2 3\n")


def test_parse_schedstat():
    assert parse_schedstat("559282 73422 1\n") == (559282, 73422)
    with pytest.raises(ValueError):
        parse_schedstat("12\n")


def test_parse_pid_stat_with_spaces_and_parentheses_in_the_name():
    # fields after comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime ...
    text = "4242 (my (odd) proc) R 1 4200 4200 0 -1 4194304 10 0 0 0 700 55 0 0 20 0 1 0"
    assert parse_pid_stat(text) == ("my (odd) proc", 4200, 755)


def test_worker_schedstat_of_this_process_grows_with_its_cpu_use():
    before = read_worker_schedstat(Path("/proc"), os.getpid())
    if before is None:
        pytest.skip("this kernel has no schedstat (CONFIG_SCHED_INFO off)")
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    after = read_worker_schedstat(Path("/proc"), os.getpid())
    assert after[0] - before[0] >= 40_000_000  # at least most of the 50 ms of CPU used
    assert after[1] >= before[1]


def _busy(name: bytes) -> str:
    """A bounded busy loop that names itself (``comm``) with PR_SET_NAME."""
    return (
        "import ctypes, time\n"
        f"ctypes.CDLL(None).prctl(15, {name!r}, 0, 0, 0)\n"
        "end = time.monotonic() + 5\n"
        "while time.monotonic() < end: pass"
    )


def test_sampler_names_a_busy_process_and_leaves_out_the_workers_group():
    # Names of this run's own (another copy of this suite running beside it has its own).
    competitor_name, worker_name = f"eqc-{os.getpid()}", f"eqw-{os.getpid()}"
    competitor = subprocess.Popen([sys.executable, "-c", _busy(competitor_name.encode())])
    # The worker runs in its own process group, as the agent starts it.
    worker = subprocess.Popen(
        [sys.executable, "-c", _busy(worker_name.encode())], start_new_session=True
    )
    try:
        sampler = ContentionSampler(worker.pid, interval_s=0.2, scan_every_s=0.2)
        sampler.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and len(sampler.samples()) < 5:
            time.sleep(0.05)
        samples = sampler.stop()
    finally:
        for p in (competitor, worker):
            p.kill()
            p.wait()
    assert len(samples) >= 3 and all(s["cpu"]["total"] > 0 for s in samples)
    assert all(s["agent_ticks"] is not None for s in samples)
    used: dict[str, int] = {}
    for s in samples:
        for name, ticks in s["others"].items():
            used[name] = used.get(name, 0) + ticks
    assert used.get(competitor_name, 0) > 0, used
    assert worker_name not in used


def _write_proc(root: Path, busy: int, procs: dict[int, tuple[str, int, int]]) -> None:
    """A recorded-style /proc: the cpu line of stat and one stat file per process."""
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"cpu  {busy} 0 0 {100_000 - busy} 0 0 0 0 0 0\n")
    for pid, (comm, pgrp, ticks) in procs.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(
            f"{pid} ({comm}) R 1 {pgrp} {pgrp} 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0\n"
        )


def test_other_processes_are_scanned_only_while_they_use_the_cpu(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    agent, worker = os.getpid(), 4242
    sampler = ContentionSampler(worker, proc_root=proc, scan_every_s=2.0)
    ticks = sampler.clock_ticks_per_s
    clock = iter([10.0, 11.0, 12.0, 13.0, 14.0, 15.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    base = {agent: ("agent", agent, 0), worker: ("eq-worker", worker, 0), 7: ("stress", 7, 0)}

    def tick(busy_s: float, stress_s: float, worker_s: float) -> dict:
        _write_proc(
            proc,
            int(busy_s * ticks),
            {
                **base,
                worker: ("eq-worker", worker, int(worker_s * ticks)),
                7: ("stress", 7, int(stress_s * ticks)),
            },
        )
        return sampler.sample_once()

    assert tick(0, 0, 0)["others"] == {}  # the first sample scans: a baseline
    # Only the worker used the CPU (1 CPU-s in 1 s): nobody else to name, no scan.
    assert tick(1.0, 0, 1.0)["others"] == {}
    assert sampler._previous == {}
    # stress takes 0.8 CPUs: this sample scans (a baseline after the quiet second) ...
    assert tick(2.8, 0.8, 2.0)["others"] == {}
    # ... the next comes before scan_every_s (2 s) has passed: no scan ...
    assert tick(4.6, 1.6, 3.0)["others"] == {}
    # ... and the one after names it with what it used since the baseline, 12..14 s.
    named = tick(6.4, 2.4, 4.0)
    assert named["others"] == {"stress": int(2.4 * ticks) - int(0.8 * ticks)}
    assert named["others_since"] == 12.0 and named["t"] == 14.0


def test_a_process_that_renames_itself_is_charged_what_it_used_since_not_its_lifetime(
    tmp_path, monkeypatch
):
    """Kernel workers rename themselves per work queue (kworker/u8:0-events_unbound), and a
    process may exec or set its name: the same pid with no fewer ticks is the same process,
    charged only what it used since the last scan. A reused pid (fewer ticks) is new."""
    proc = tmp_path / "proc"
    agent, worker = os.getpid(), 4242
    sampler = ContentionSampler(worker, proc_root=proc, scan_every_s=1.0)
    ticks = sampler.clock_ticks_per_s
    clock = iter([10.0, 11.0, 12.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    base = {agent: ("agent", agent, 0), worker: ("eq-worker", worker, 0)}
    lifetime = 500 * ticks  # what the kernel worker used before this phase began

    def tick(busy_s: float, kworker: tuple[str, int], spare: tuple[str, int]) -> dict:
        _write_proc(
            proc,
            int(busy_s * ticks),
            {**base, 9: (*kworker[:1], 2, kworker[1]), 11: (*spare[:1], 11, spare[1])},
        )
        return sampler.sample_once()

    tick(0, ("kworker/u8:0-events_unbound", lifetime), ("old", 100 * ticks))
    renamed = tick(
        1.0,
        ("kworker/u8:0-mm_percpu_wq", lifetime + int(0.5 * ticks)),
        ("new", int(0.3 * ticks)),  # pid 11 exited and was reused
    )
    assert renamed["others"] == {
        "kworker/u8:0-mm_percpu_wq": int(0.5 * ticks),
        "new": int(0.3 * ticks),
    }


def test_without_proc_contention_is_not_measurable_and_never_zero(tmp_path):
    """An empty proc root, as on macOS: the sampler runs, every figure it cannot read is
    None (not 0), and the probe says why."""
    assert contention_unmeasurable(Path("/proc")) is None
    assert "not measurable" in contention_unmeasurable(tmp_path)
    assert read_worker_schedstat(tmp_path, os.getpid()) is None
    sampler = ContentionSampler(os.getpid(), proc_root=tmp_path, interval_s=0.05)
    sampler.start()
    time.sleep(0.12)
    samples = sampler.stop()
    assert len(samples) >= 2
    assert all(s["cpu"] is None and s["worker_ticks"] is None for s in samples)
    assert all(s["others"] == {} for s in samples)
