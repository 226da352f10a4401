"""cpufreq policies on recorded board trees."""

from __future__ import annotations

from pathlib import Path

from edgequal.agent.probes.cpufreq import governors, parse_policy, read_cpufreq
from edgequal.agent.probes.sysfs import parse_cpu_list

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"


def test_parse_cpu_list():
    assert parse_cpu_list("0-3\n") == [0, 1, 2, 3]
    assert parse_cpu_list("0 1 2 3") == [0, 1, 2, 3]
    assert parse_cpu_list("0-1,4-5,7") == [0, 1, 4, 5, 7]
    assert parse_cpu_list("") == []
    assert parse_cpu_list("3-1") is None
    assert parse_cpu_list("x") is None
    assert parse_cpu_list(None) is None


def test_parse_policy_prefers_hardware_clock():
    p = parse_policy("policy0", {"scaling_cur_freq": "1500000", "cpuinfo_cur_freq": "600000"})
    assert p["cur_khz"] == 600000 and p["cur_source"] == "cpuinfo_cur_freq"
    p = parse_policy("policy0", {"scaling_cur_freq": "1500000", "cpuinfo_cur_freq": None})
    assert p["cur_khz"] == 1500000 and p["cur_source"] == "scaling_cur_freq (requested)"
    p = parse_policy("policy0", {})
    assert p["cur_khz"] is None and p["cur_source"] is None and p["governor"] is None


def test_pi4_requested_clock_only():
    f = read_cpufreq(SYSFS / "pi4")
    assert f["available"] and f["online"] == "0-3" and f["online_cpus"] == [0, 1, 2, 3]
    p = f["policies"]["policy0"]
    assert p["governor"] == "ondemand"
    assert (p["min_khz"], p["max_khz"]) == (600000, 1500000)
    assert p["cpuinfo_cur_khz"] is None  # root-only on the Pi: not recorded
    assert p["cur_khz"] == 1500000 and p["cur_source"] == "scaling_cur_freq (requested)"
    assert p["related_cpus"] == [0, 1, 2, 3]
    assert governors(f) == {"policy0": "ondemand"}


def test_orin_two_clusters():
    f = read_cpufreq(SYSFS / "jetson-orin-nano")
    assert list(f["policies"]) == ["policy0", "policy4"]
    p4 = f["policies"]["policy4"]
    assert p4["related_cpus"] == [4, 5]
    assert p4["cur_khz"] == 1344000 and p4["cur_source"] == "cpuinfo_cur_freq"
    assert p4["max_khz"] == 1344000 and p4["cpuinfo_max_khz"] == 1510400
    assert governors(f) == {"policy0": "schedutil", "policy4": "schedutil"}
    assert f["present_cpus"] == [0, 1, 2, 3, 4, 5]


def test_absent(tmp_path):
    f = read_cpufreq(tmp_path)
    assert not f["available"] and f["policies"] == {} and f["online"] is None
    assert "no cpufreq policies" in f["reason"]
