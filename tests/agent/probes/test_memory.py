"""A process's resident memory: statm under the proc root, psutil where there is no /proc."""

from __future__ import annotations

import os

import psutil
import pytest
from edgequal.agent.probes.memory import (
    parse_statm,
    parse_vm_hwm,
    read_peak_rss_bytes,
    read_rss_bytes,
)


def test_parse_statm_reads_the_resident_pages():
    assert parse_statm("5123 1711 402 1 0 900 0\n", 4096) == 1711 * 4096


def test_the_proc_root_is_honoured(tmp_path):
    # A recorded statm under a root of its own: the reader takes the root as probes do.
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "statm").write_text("9000 250 100 1 0 300 0\n")
    assert read_rss_bytes(4242, tmp_path) == 250 * os.sysconf("SC_PAGE_SIZE")


def test_without_proc_the_figure_comes_from_psutil(tmp_path):
    """An empty proc root, as on macOS: the same process's RSS, read through psutil."""
    from_psutil = read_rss_bytes(os.getpid(), tmp_path)
    from_proc = read_rss_bytes(os.getpid(), "/proc")
    assert from_psutil == pytest.approx(psutil.Process().memory_info().rss, rel=0.05)
    assert from_psutil == pytest.approx(from_proc, rel=0.05)
    with pytest.raises(psutil.NoSuchProcess):
        read_rss_bytes(2**22 + 12345, tmp_path)  # above pid_max: no such process


def test_parse_vm_hwm_reads_the_peak_in_kilobytes():
    status = "Name:\tpython3\nVmPeak:\t  300000 kB\nVmHWM:\t   13568 kB\nVmRSS:\t 13000 kB\n"
    assert parse_vm_hwm(status) == 13568 * 1024
    assert parse_vm_hwm("Name:\tkthreadd\n") is None  # a kernel thread has no memory lines


def test_a_worker_forked_from_a_large_agent_reports_its_own_peak(tmp_path):
    """ru_maxrss of a child of a 200 MB parent says 200 MB (Linux keeps it across exec);
    the worker's peak (worker/io.py) is its own."""
    import subprocess
    import sys

    code = (
        "import resource; from edgequal.agent.worker.io import peak_rss_bytes; "
        "print(peak_rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"
    )
    ballast = bytearray(200 * 2**20)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touched: resident
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    del ballast
    peak, maxrss = map(int, out.stdout.split())
    assert maxrss > 200 * 2**20  # the parent's memory, counted by ru_maxrss
    assert peak < 150 * 2**20  # the worker's own
    assert read_peak_rss_bytes(os.getpid()) > 0 and read_peak_rss_bytes(1, tmp_path) is None
