"""Raspberry Pi probe: get_throttled decoding (every bit), vcgencmd replies, sysfs fallbacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from edgequal.agent.probes.raspberry_pi import (
    THROTTLE_FLAGS,
    parse_measure_clock,
    parse_measure_temp,
    parse_throttled,
    read_raspberry_pi,
    read_throttled,
)
from edgequal.contract.board_families import pi_flags_throttling as throttle_active

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"


@pytest.mark.parametrize("bit", range(4))
def test_each_now_bit(bit):
    flags = parse_throttled(f"throttled={hex(1 << bit)}")
    assert flags["raw"] == 1 << bit
    assert flags["now"] == {f: i == bit for i, f in enumerate(THROTTLE_FLAGS)}
    assert not any(flags["since_boot"].values())


@pytest.mark.parametrize("bit", range(4))
def test_each_since_boot_bit(bit):
    flags = parse_throttled(f"throttled={hex(1 << (16 + bit))}")
    assert flags["since_boot"] == {f: i == bit for i, f in enumerate(THROTTLE_FLAGS)}
    assert not any(flags["now"].values())


def test_documented_values():
    assert THROTTLE_FLAGS == ("under_voltage", "freq_capped", "throttled", "soft_temp_limit")
    none = parse_throttled("throttled=0x0")
    assert (
        none["raw"] == 0 and not any(none["now"].values()) and not any(none["since_boot"].values())
    )
    # 0x50000: throttling and under-voltage have occurred, neither active now [RPI-VC].
    f = parse_throttled("throttled=0x50000\n")
    assert f["hex"] == "0x50000"
    assert f["since_boot"] == {
        "under_voltage": True,
        "freq_capped": False,
        "throttled": True,
        "soft_temp_limit": False,
    }
    assert not any(f["now"].values())
    # Bits outside 0-3 and 16-19 are ignored by the flags but kept in raw.
    assert parse_throttled("0xf000f")["raw"] == 0xF000F
    assert all(parse_throttled("0xf000f")["now"].values())


def test_sysfs_form_and_bad_text():
    assert parse_throttled("50005\n")["raw"] == 0x50005
    assert parse_throttled("0")["raw"] == 0
    with pytest.raises(ValueError):
        parse_throttled('error=1 error_msg="Command not registered"')
    with pytest.raises(ValueError):
        parse_throttled("")


def test_throttle_active_excludes_under_voltage():
    assert not throttle_active(None)
    assert not throttle_active(parse_throttled("0x1"))  # under-voltage alone
    assert throttle_active(parse_throttled("0x2"))
    assert throttle_active(parse_throttled("0x4"))
    assert throttle_active(parse_throttled("0x8"))
    assert not throttle_active(parse_throttled("0xe0000"))  # only "since boot"


def test_measure_clock_and_temp():
    assert parse_measure_clock("frequency(48)=1500398464\n") == 1500398464
    assert parse_measure_clock("frequency(0)=2400000000") == 2400000000
    assert parse_measure_temp("temp=54.2'C\n") == 54.2
    assert parse_measure_temp("temp=-3.0'C") == -3.0
    with pytest.raises(ValueError):
        parse_measure_clock("error=2")
    with pytest.raises(ValueError):
        parse_measure_temp("temp=")


def test_pi4_with_vcgencmd(board_tools):
    board_tools("pi4")
    pi = read_raspberry_pi(SYSFS / "pi4")
    assert pi["available"]
    assert pi["throttled_source"] == "vcgencmd" and pi["throttled"]["raw"] == 0x50005
    assert pi["throttled"]["now"]["under_voltage"] and pi["throttled"]["now"]["throttled"]
    # The measured clock shows the throttling that cpufreq (1500000 kHz requested) hides.
    assert pi["arm_clock_hz"] == 600117184 and pi["arm_clock_source"] == "vcgencmd"
    assert pi["temp_c"] == 54.2 and pi["temp_source"] == "vcgencmd"


def test_pi4_without_vcgencmd_falls_back_to_sysfs(board_tools):
    board_tools(None)
    pi = read_raspberry_pi(SYSFS / "pi4")
    assert pi["available"]
    assert pi["throttled_source"] == "sysfs" and pi["throttled"]["raw"] == 0x50005
    assert pi["arm_clock_hz"] == 1500000000 and pi["arm_clock_source"] == "cpufreq (requested only)"
    assert pi["temp_c"] == 54.53 and pi["temp_source"] == "thermal_zone0"


def test_pi5_without_vcgencmd_has_no_flags(board_tools):
    board_tools(None)
    flags, why = read_throttled(SYSFS / "pi5")
    assert flags is None and "vcgencmd not found on PATH" in why and "get_throttled" in why
    pi = read_raspberry_pi(SYSFS / "pi5")
    assert pi["available"] and pi["throttled"] is None
    assert pi["temp_c"] == 50.15


def test_pi5_with_vcgencmd(board_tools):
    board_tools("pi5")
    pi = read_raspberry_pi(SYSFS / "pi5")
    assert pi["throttled"]["raw"] == 0 and not throttle_active(pi["throttled"])
    assert pi["arm_clock_hz"] == 2_400_000_000
    assert pi["temp_c"] == 50.1


def test_not_a_pi(board_tools):
    board_tools(None)
    pi = read_raspberry_pi(SYSFS / "jetson-orin-nano")
    assert (
        pi == {"available": False, "reason": pi["reason"]} and "not a Raspberry Pi" in pi["reason"]
    )


def test_failing_vcgencmd_is_absent_not_fatal(tmp_path, monkeypatch):
    tool = tmp_path / "vcgencmd"
    tool.write_text("#!/bin/sh\necho 'VCHI initialization failed' >&2\nexit 1\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    pi = read_raspberry_pi(SYSFS / "pi5")
    assert pi["throttled"] is None
    assert "exited with 1: VCHI initialization failed" in pi["throttled_source"]
    assert pi["arm_clock_source"] == "cpufreq (requested only)"
