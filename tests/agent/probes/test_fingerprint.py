"""Board fingerprint on recorded trees and on the machine running the tests."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

from edgequal.agent.probes import read_all
from edgequal.agent.probes.fingerprint import (
    fingerprint,
    parse_compatible,
    parse_meminfo_kb,
    parse_os_release,
)

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"


def test_pure_parsers():
    assert parse_compatible("raspberrypi,5-model-b\0brcm,bcm2712\0") == [
        "raspberrypi,5-model-b",
        "brcm,bcm2712",
    ]
    assert parse_compatible(None) == []
    assert parse_os_release("PRETTY_NAME=\"Ubuntu 22.04.5 LTS\"\n# c\nID=ubuntu\nX='q'\n") == {
        "PRETTY_NAME": "Ubuntu 22.04.5 LTS",
        "ID": "ubuntu",
        "X": "q",
    }
    assert parse_meminfo_kb("MemTotal:        3882900 kB\nMemFree: 1 kB\n") == 3882900
    assert parse_meminfo_kb("MemFree: 1 kB\n") is None


def test_pi5(board_tools):
    board_tools("pi5")
    fp = fingerprint(SYSFS / "pi5")
    assert fp["board_model"] == "Raspberry Pi 5 Model B Rev 1.0"  # NUL stripped
    assert fp["board_model_source"] == "device-tree"
    assert fp["soc"] == "brcm,bcm2712"
    assert "thermal_trip_c" not in fp  # its zone has no passive trip point
    assert fp["kernel"] == "6.6.51+rpt-rpi-2712"  # from the tree, not this machine
    assert fp["os_release"] == "Debian GNU/Linux 12 (bookworm)"
    assert fp["boot_id"] == "a3d5e7f9-1b2c-4d6e-8f0a-2c4e6a8b0d12"
    assert fp["cpu_count"] == 4
    assert fp["memory_total_kb"] == 8245488 and fp["memory_mb"] == 8052
    assert fp["cpu_governors"] == {"policy0": "ondemand"}
    assert fp["online_cpus"] == "0-3"
    assert fp["raspberry_pi"]["get_throttled"]["raw"] == 0
    assert fp["raspberry_pi"]["get_throttled_source"] == "vcgencmd"
    assert "jetson" not in fp
    assert fp["absent"] == {}
    # What describes the interpreter comes from the process.
    assert fp["architecture"] == platform.machine() and fp["python"] == platform.python_version()


def test_pi5_without_vcgencmd_says_why(board_tools):
    board_tools(None)
    fp = fingerprint(SYSFS / "pi5")
    assert fp["raspberry_pi"]["get_throttled"] is None
    assert "vcgencmd not found on PATH" in fp["absent"]["raspberry_pi.get_throttled"]


def test_orin_nano(board_tools):
    board_tools("jetson-orin-nano")
    fp = fingerprint(SYSFS / "jetson-orin-nano")
    assert fp["board_model"] == "NVIDIA Jetson Orin Nano Developer Kit"
    assert fp["soc"] == "nvidia,tegra234"
    assert fp["cpu_count"] == 6
    assert fp["thermal_trip_c"] == 99.0  # the lowest passive trip of its zones
    assert fp["cpu_governors"] == {"policy0": "schedutil", "policy4": "schedutil"}
    assert fp["jetson"]["nvpmodel"]["mode"] == "25W"
    assert fp["jetson"]["jetson_clocks"]["gpu"]["max_hz"] == 918000000
    assert fp["jetson"]["l4t"]["version"] == "36.4.0"
    assert "raspberry_pi" not in fp


def test_empty_root_is_all_absent(tmp_path, board_tools):
    fp = fingerprint(tmp_path)
    for key in ("board_model", "soc", "kernel", "os_release", "boot_id", "cpu_count", "memory_mb"):
        assert fp[key] is None, key
        assert key in fp["absent"], key
    assert fp["cpu_governors"] == {}


def test_dmi_fallback(tmp_path):
    dmi = tmp_path / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_name").write_text("NUC11TNHi5\n")
    (dmi / "sys_vendor").write_text("Intel(R) Client Systems\n")
    fp = fingerprint(tmp_path)
    assert fp["board_model"] == "Intel(R) Client Systems NUC11TNHi5"
    assert fp["board_model_source"] == "dmi"


def test_host_root_is_cheap_and_uses_uname(board_tools, monkeypatch):
    # Cheap: a few file reads, no board command started (none is on PATH here), and well
    # under 50 ms of this thread's own CPU time, however busy the machine is.
    started = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            started.append(args[0] if args else kwargs.get("args"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    t0 = time.thread_time()
    fp = fingerprint("/")
    cpu_s = time.thread_time() - t0
    assert fp["kernel"] == os.uname().release
    assert fp["cpu_count"] and fp["cpu_count"] >= 1
    assert started == []
    assert cpu_s < 0.05


def test_env_root(monkeypatch, board_tools):
    monkeypatch.setenv("EDGEQUAL_ROOT", str(SYSFS / "pi4"))
    assert fingerprint()["board_model"] == "Raspberry Pi 4 Model B Rev 1.2"


def test_read_all_runs_board_commands_once(tmp_path, monkeypatch, board_tools):
    # A vcgencmd that logs each call, then replays the Pi 4 recording.
    replay = SYSFS.parent / "commands" / "pi4" / "bin" / "vcgencmd"
    calls = tmp_path / "calls.log"
    tool = tmp_path / "bin" / "vcgencmd"
    tool.parent.mkdir()
    tool.write_text(f'#!/bin/bash\necho "$*" >> "{calls}"\nexec "{replay}" "$@"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    info = read_all(SYSFS / "pi4")
    assert calls.read_text().splitlines().count("get_throttled") == 1
    assert info["root"] == str(SYSFS / "pi4")
    assert info["fingerprint"]["raspberry_pi"]["get_throttled"]["raw"] == 0x50005
    assert info["raspberry_pi"]["arm_clock_hz"] == 600117184
    assert info["thermal"]["authoritative_temp_c"] == 54.53
    assert info["cpufreq"]["policies"]["policy0"]["scaling_cur_khz"] == 1500000
    assert not info["jetson"]["available"]
    # Power rails are among the readings: absent on a Pi 4 (with the reason), read on a Jetson.
    assert info["power"]["present"] is False and "no readable power rail" in info["power"]["reason"]
    assert "total_w" not in info["power"]
    board_tools("jetson-orin-nano")
    info = read_all(SYSFS / "jetson-orin-nano")
    assert info["power"]["rails_w"]["VDD_IN"] == 4.886464
    assert (info["power"]["total_w"], info["power"]["total_from"]) == (4.886464, "VDD_IN")
    assert info["fingerprint"]["jetson"]["nvpmodel"] == info["jetson"]["nvpmodel"]
    assert info["thermal"]["authoritative_zone"] == "tj-thermal"
