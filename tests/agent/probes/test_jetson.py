"""Jetson probe: nvpmodel, jetson_clocks, GPU devfreq and L4T release on recorded boards."""

from __future__ import annotations

from pathlib import Path

import pytest
from edgequal.agent.probes.jetson import (
    clocks_locked,
    parse_jetson_clocks,
    parse_l4t_release,
    parse_nvpmodel,
    read_gpu_freq,
    read_jetson,
)

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"
COMMANDS = Path(__file__).resolve().parents[2] / "fixtures" / "commands"


def test_parse_nvpmodel():
    assert parse_nvpmodel("NV Power Mode: MAXN\n0\n") == {"mode": "MAXN", "id": 0, "fan_mode": None}
    assert parse_nvpmodel("NVPM WARN: fan mode is not set!\nNV Power Mode: 15W\n2\n") == {
        "mode": "15W",
        "id": 2,
        "fan_mode": None,
    }
    assert parse_nvpmodel("NV Fan Mode:quiet\nNV Power Mode: MODE_30W\n2")["fan_mode"] == "quiet"
    assert parse_nvpmodel("NV Power Mode: MAXN_SUPER\n")["id"] is None
    with pytest.raises(ValueError):
        parse_nvpmodel("NVPM ERROR: failed to read PARAM")


def test_parse_jetson_clocks_orin_recording():
    show = parse_jetson_clocks((COMMANDS / "jetson-orin-nano/jetson_clocks_show.txt").read_text())
    assert show["soc_family"] == "tegra234"
    assert show["machine"] == "NVIDIA Jetson Orin Nano Developer Kit"
    assert show["online_cpus"] == "0-5"
    assert list(show["cpus"]) == [f"cpu{i}" for i in range(6)]
    assert show["cpus"]["cpu5"] == {
        "online": True,
        "governor": "schedutil",
        "min_khz": 729600,
        "max_khz": 1344000,
        "cur_khz": 1344000,
    }
    assert show["gpu"] == {"min_hz": 306000000, "max_hz": 918000000, "cur_hz": 306000000}
    assert show["emc"]["max_hz"] == 3199000000 and show["emc"]["freq_override"] == 0
    assert show["nv_power_mode"] == "25W"
    assert show["clocks_locked"] is False


def test_clocks_locked_when_min_max_cur_equal():
    text = (
        "cpu0: Online=1 Governor=schedutil MinFreq=1510400 MaxFreq=1510400 CurrentFreq=1510400 IdleStates: WFI=0\n"
        "cpu1: Online=0 Governor=schedutil MinFreq=729600 MaxFreq=1510400 CurrentFreq=729600 IdleStates: WFI=0\n"
        "GPU MinFreq=1020000000 MaxFreq=1020000000 CurrentFreq=1020000000\n"
        "NV Power Mode: MAXN_SUPER\n"
    )
    show = parse_jetson_clocks(text)
    assert show["cpus"]["cpu1"]["online"] is False
    assert show["clocks_locked"] is True  # the offline core does not count
    show["gpu"]["cur_hz"] = 306000000
    assert clocks_locked(show) is False


def test_parse_jetson_clocks_tx1_spelling_and_garbage():
    show = parse_jetson_clocks(
        "cpu0: Gonvernor=interactive MinFreq=102000 MaxFreq=1734000 CurrentFreq=510000\n"
    )
    assert show["cpus"]["cpu0"]["governor"] == "interactive"
    assert show["cpus"]["cpu0"]["cur_khz"] == 510000
    with pytest.raises(ValueError):
        parse_jetson_clocks("Error! You must be root to use this script.\n")


def test_parse_l4t_release():
    text = (SYSFS / "jetson-orin-nano/etc/nv_tegra_release").read_text()
    l4t = parse_l4t_release(text)
    assert (l4t["release"], l4t["revision"], l4t["version"]) == ("R36", "4.0", "36.4.0")
    assert l4t["board"] == "generic" and l4t["gcid"] == "37537400"
    assert l4t["date"] == "Fri Sep 13 04:36:44 UTC 2024"
    nano = parse_l4t_release((SYSFS / "jetson-nano/etc/nv_tegra_release").read_text())
    assert nano["version"] == "32.7.1" and nano["board"] == "t210ref"
    with pytest.raises(ValueError):
        parse_l4t_release("")


def test_gpu_devfreq_both_paths(tmp_path):
    g = read_gpu_freq(SYSFS / "jetson-orin-nano")
    assert g["cur_hz"] == 306000000 and g["max_hz"] == 918000000
    assert g["path"] == "/sys/devices/platform/17000000.gpu/devfreq_dev"
    old = tmp_path / "sys/devices/17000000.ga10b/devfreq/17000000.ga10b"
    old.mkdir(parents=True)
    (old / "cur_freq").write_text("624750000\n")
    g = read_gpu_freq(tmp_path)
    assert g["cur_hz"] == 624750000 and g["min_hz"] is None
    assert g["path"] == "/sys/devices/17000000.ga10b/devfreq/17000000.ga10b"
    assert read_gpu_freq(SYSFS / "pi5")["reason"] == "no GPU devfreq node"


def test_orin_nano_with_tools(board_tools):
    board_tools("jetson-orin-nano")
    j = read_jetson(SYSFS / "jetson-orin-nano")
    assert j["available"] and j["absent"] == {}
    assert j["nvpmodel"] == {"mode": "25W", "id": 1, "fan_mode": None}
    assert j["jetson_clocks"]["nv_power_mode"] == "25W"
    assert j["l4t"]["version"] == "36.4.0"
    assert j["gpu"]["cur_hz"] == 306000000


def test_nano_without_tools_reports_absent(board_tools):
    board_tools(None)
    j = read_jetson(SYSFS / "jetson-nano")
    assert j["available"] and j["nvpmodel"] is None and j["jetson_clocks"] is None
    assert j["absent"]["nvpmodel"] == "nvpmodel not found on PATH"
    assert j["absent"]["jetson_clocks"] == "jetson_clocks not found on PATH"
    assert j["absent"]["gpu"] == "no GPU devfreq node"
    assert j["l4t"]["release"] == "R32"


def test_nano_with_tools(board_tools):
    board_tools("jetson-nano")
    j = read_jetson(SYSFS / "jetson-nano")
    assert j["nvpmodel"] == {"mode": "MAXN", "id": 0, "fan_mode": None}
    assert j["jetson_clocks"]["cpus"]["cpu0"]["max_khz"] == 1428000
    assert j["jetson_clocks"]["gpu"]["cur_hz"] == 384000000


def test_not_a_jetson(board_tools):
    board_tools(None)
    j = read_jetson(SYSFS / "pi4")
    assert not j["available"] and "not a Jetson" in j["reason"]
