"""A process's resident memory: statm under the proc root, psutil where there is no /proc."""

from __future__ import annotations

import os

import psutil
import pytest
from edgequal.agent.probes.memory import parse_statm, read_rss_bytes


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
