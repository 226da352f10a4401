"""Telemetry sampler (thread in the agent process) and its pure helpers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from edgequal.agent.measure.throttle import throttle_reasons
from edgequal.agent.probes.raspberry_pi import parse_throttled
from edgequal.agent.probes.telemetry import (
    TelemetrySampler,
    idle_cooldown_ok,
    is_throttle_cooling_device,
    linear_slope,
    slope_c_per_min,
)

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"


def _s(t_s, temp_c, **kw):
    return {"t_s": t_s, "temp_c": temp_c, **kw}


def test_linear_slope_hand_computed():
    # y = 2x + 1 exactly.
    assert linear_slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    # x = 0,1,2; y = 0,2,1: mean x 1, mean y 1; sxy = (-1)(-1)+0+(1)(0) = 1; sxx = 2 -> 0.5
    assert linear_slope([0, 1, 2], [0, 2, 1]) == pytest.approx(0.5)
    assert linear_slope([1], [1]) is None
    assert linear_slope([2, 2], [1, 5]) is None


def test_slope_c_per_min_skips_missing():
    samples = [_s(0, 50.0), _s(30, None), _s(60, 51.0), _s(120, 52.0)]
    assert slope_c_per_min(samples) == pytest.approx(1.0)
    assert slope_c_per_min([_s(0, None), _s(1, 50.0)]) is None


def test_idle_cooldown_ok():
    flat = [_s(t, 44.0 + 0.001 * t) for t in range(0, 121, 10)]  # 0.06 °C/min
    assert idle_cooldown_ok(flat, idle_c=40.0)  # 44.12 <= 45
    assert not idle_cooldown_ok(flat, idle_c=38.0)  # 44.12 > 43
    rising = [_s(t, 40.0 + t / 60.0) for t in range(0, 121, 10)]  # 1 °C/min
    assert not idle_cooldown_ok(rising, idle_c=40.0)
    assert idle_cooldown_ok(rising, idle_c=40.0, max_slope_c_per_min=1.5)
    falling = [_s(t, 44.0 - t / 60.0) for t in range(0, 121, 10)]  # cooling is fine
    assert idle_cooldown_ok(falling, idle_c=40.0)
    assert not idle_cooldown_ok([_s(0, 40.0)], idle_c=40.0)
    assert not idle_cooldown_ok([_s(0, None), _s(1, None)], idle_c=40.0)


def test_cooling_device_classification():
    assert is_throttle_cooling_device("cpufreq-cpu0")
    assert is_throttle_cooling_device("thermal-cpufreq-0")
    assert is_throttle_cooling_device("cpu-throttle")
    assert not is_throttle_cooling_device("pwm-fan")
    assert not is_throttle_cooling_device("Processor")
    assert not is_throttle_cooling_device(None)


def test_throttle_reasons():
    base = _s(5, 50.0, clocks_khz={"policy0": 1500000}, cooling_states={}, throttled=None)
    assert throttle_reasons(base, trip_c=60.0, nominal_khz={"policy0": 1500000}) == []
    hot = dict(base, temp_c=60.0)
    assert throttle_reasons(hot, trip_c=60.0) == ["passive_trip"]
    slow = dict(base, clocks_khz={"policy0": 1455000})  # 0.97 x 1500000 = 1455000: not below
    assert throttle_reasons(slow, nominal_khz=1500000) == []
    slow = dict(base, clocks_khz={"policy0": 1454999})
    assert throttle_reasons(slow, nominal_khz=1500000) == ["clock_drop"]
    pi = dict(base, arm_clock_khz=600117, throttled=parse_throttled("0x50005"))
    assert throttle_reasons(pi, nominal_khz={"policy0": 1500000}) == ["get_throttled", "clock_drop"]
    uv_only = dict(base, throttled=parse_throttled("0x1"))
    assert throttle_reasons(uv_only) == []
    cooled = dict(base, cooling_states={"cooling_device0": 1})
    assert throttle_reasons(cooled) == ["cooling_device"]


def test_sample_once_orin(board_tools):
    s = TelemetrySampler(SYSFS / "jetson-orin-nano").sample_once()
    assert s["t_s"] == 0.0
    assert s["temp_c"] == 43.5 and s["max_temp_c"] == 43.5
    assert s["clocks_khz"] == {"policy0": 1344000, "policy4": 1344000}
    assert s["throttled"] is None and s["arm_clock_khz"] is None and s["cooling_states"] == {}


def test_sample_once_nano_ignores_pmic(board_tools):
    sampler = TelemetrySampler(SYSFS / "jetson-nano")
    assert "PMIC-Die" not in sampler.zone_types
    s = sampler.sample_once()
    assert s["temp_c"] == 36.5 and s["max_temp_c"] == 36.5


def test_sample_once_pi4_vcgencmd_and_sysfs(board_tools):
    board_tools("pi4")
    s = TelemetrySampler(SYSFS / "pi4").sample_once()
    assert s["throttled"]["raw"] == 0x50005
    assert s["arm_clock_khz"] == 600117
    assert s["clocks_khz"] == {"policy0": 1500000}  # requested only
    board_tools(None)
    s = TelemetrySampler(SYSFS / "pi4").sample_once()
    assert s["throttled"]["raw"] == 0x50005  # from the firmware sysfs attribute
    assert s["arm_clock_khz"] is None


def test_sample_once_pi5_fan_not_a_throttle(board_tools):
    s = TelemetrySampler(SYSFS / "pi5").sample_once()
    assert s["cooling_states"] == {}  # pwm-fan excluded
    assert s["temp_c"] == 50.15


def test_no_sensors(tmp_path):
    sampler = TelemetrySampler(tmp_path)
    assert not sampler.has_temperature
    s = sampler.sample_once()
    assert s["temp_c"] is None and s["clocks_khz"] == {}


def test_thread_samples_a_changing_tree(tmp_path, board_tools):
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("cpu-thermal\n")
    (zone / "temp").write_text("40000\n")
    pol = tmp_path / "sys/devices/system/cpu/cpufreq/policy0"
    pol.mkdir(parents=True)
    (pol / "scaling_cur_freq").write_text("1500000\n")
    sampler = TelemetrySampler(tmp_path, interval_s=0.05)
    with sampler:
        time.sleep(0.18)
        (zone / "temp").write_text("61000\n")
        time.sleep(0.18)
    samples = sampler.samples()
    assert len(samples) >= 2  # about 7; a busy machine may delay the thread
    # Taken as the sampler starts, before the zone changed (a few ms on a quiet machine;
    # 21 ms beside three other suites: the thread's start is the scheduler's).
    assert samples[0]["t_s"] < 0.18
    ts = [s["t_s"] for s in samples]
    assert ts == sorted(ts)
    temps = [s["temp_c"] for s in samples]
    assert temps[0] == 40.0 and temps[-1] == 61.0
    assert all(s["clocks_khz"] == {"policy0": 1500000} for s in samples)
    n = len(sampler.samples())
    time.sleep(0.12)
    assert len(sampler.samples()) == n  # stopped
