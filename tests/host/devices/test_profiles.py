"""Device profiles: every packaged file loads, strict validation, matching by fingerprint."""

from __future__ import annotations

from pathlib import Path

import pytest
from edgequal.agent.probes.fingerprint import fingerprint
from edgequal.agent.probes.telemetry import THROTTLE_INDICATORS
from edgequal.host.devices.profiles import (
    KNOWN_THROTTLE_INDICATORS,
    DeviceProfile,
    PlanDurations,
    ProfileError,
    all_profiles,
    load_profile,
    match_profile,
    profile_names,
)
from edgequal.host.errors import UsageError

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"

EXPECTED = [
    "generic/linux-aarch64",
    "generic/linux-x86_64",
    "nvidia/jetson-agx-orin",
    "nvidia/jetson-nano",
    "nvidia/jetson-orin-nano",
    "nvidia/jetson-orin-nx",
    "nvidia/jetson-xavier-nx",
    "raspberry-pi/3b-plus",
    "raspberry-pi/4b",
    "raspberry-pi/5",
    "raspberry-pi/zero-2w",
]

GOOD = """\
name = "lab/pi"
description = "a lab Pi"
architecture = "aarch64"
cores = 4
memory_mb = 4096
match = ["Lab Pi"]
runtimes = ["onnxruntime"]
trip_c = 80
max_c = 85.0
throttle_indicators = ["get_throttled"]
default_threads = 3

[plans.quick]
cold_runs = 3
latency_min_runs = 200
latency_min_s = 3.0
sustain_s = 20
window_s = 2.0

[plans.standard]
cold_runs = 7
latency_min_runs = 1000
latency_min_s = 60.0
sustain_s = 600.0
window_s = 30.0

[plans.soak]
cold_runs = 7
latency_min_runs = 1000
latency_min_s = 60.0
sustain_s = 1800.0
window_s = 30.0
"""


def _write(tmp_path, text):
    path = tmp_path / "lab-pi.toml"
    path.write_text(text)
    return path


def test_every_packaged_profile_loads_and_is_named_after_its_file():
    assert profile_names() == EXPECTED
    profiles = all_profiles()
    assert [p.name for p in profiles] == EXPECTED
    for p in profiles:
        assert p.source.endswith(p.name + ".toml")
        assert p.trip_c < p.max_c
        assert set(p.plans) == {"quick", "standard", "soak"}
        assert p.plan("standard").sustain_s == 600.0 and p.plan("standard").window_s == 30.0
        assert p.plan("soak").sustain_s == 1800.0
        assert 1 <= p.default_threads <= p.cores
        assert p.is_generic == p.name.startswith("generic/")


def test_profile_indicators_are_the_telemetry_ones():
    assert set(KNOWN_THROTTLE_INDICATORS) == set(THROTTLE_INDICATORS)


def test_documented_figures():
    pi5 = load_profile("raspberry-pi/5")
    assert (pi5.trip_c, pi5.max_c, pi5.architecture, pi5.cores) == (80.0, 85.0, "aarch64", 4)
    assert "get_throttled" in pi5.throttle_indicators
    assert load_profile("raspberry-pi/3b-plus").trip_c == 60.0
    agx = load_profile("nvidia/jetson-agx-orin")
    assert agx.trip_c == 99.0 and agx.max_c < 104.5


def test_load_from_path_and_types(tmp_path):
    p = load_profile(_write(tmp_path, GOOD))
    assert isinstance(p, DeviceProfile)
    assert p.name == "lab/pi" and p.vendor == "lab"
    assert p.trip_c == 80.0 and isinstance(p.trip_c, float)  # an integer is a number
    assert p.match == ("Lab Pi",)
    assert p.plan("quick") == PlanDurations(3, 200, 3.0, 20.0, 2.0)
    assert p.to_dict()["match"] == ["Lab Pi"]
    assert p.to_dict()["plans"]["quick"]["window_s"] == 2.0
    assert load_profile(str(_write(tmp_path, GOOD))).name == "lab/pi"


def _refused(tmp_path, text):
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert isinstance(e.value, UsageError) and e.value.exit_code == 2
    assert str(path) in str(e.value)
    return str(e.value)


def test_missing_field(tmp_path):
    msg = _refused(tmp_path, GOOD.replace("trip_c = 80\n", ""))
    assert "missing field 'trip_c'" in msg


def test_missing_plan_field_and_plan(tmp_path):
    assert "missing field 'plans.soak.window_s'" in _refused(
        tmp_path, GOOD[: GOOD.rindex("window_s")]
    )
    no_soak = GOOD[: GOOD.index("[plans.soak]")]
    assert "missing field 'plans.soak'" in _refused(tmp_path, no_soak)


def test_wrong_type(tmp_path):
    msg = _refused(tmp_path, GOOD.replace("cores = 4", 'cores = "four"'))
    assert "field 'cores' must be an integer, got string 'four'" in msg
    msg = _refused(tmp_path, GOOD.replace("cores = 4", "cores = true"))
    assert "field 'cores' must be an integer, got boolean True" in msg
    msg = _refused(tmp_path, GOOD.replace('match = ["Lab Pi"]', 'match = "Lab Pi"'))
    assert "field 'match' must be a list of strings" in msg
    msg = _refused(tmp_path, GOOD.replace("sustain_s = 20\n", 'sustain_s = "20s"\n'))
    assert "field 'plans.quick.sustain_s' must be a number" in msg


def test_unknown_key(tmp_path):
    msg = _refused(tmp_path, GOOD.replace("cores = 4", "cores = 4\ntrip = 80"))
    assert "unknown key 'trip'" in msg
    msg = _refused(tmp_path, GOOD.replace("window_s = 2.0", "window_s = 2.0\nwarmup_s = 1"))
    assert "unknown key 'plans.quick.warmup_s'" in msg
    msg = _refused(tmp_path, GOOD + "\n[plans.nightly]\ncold_runs = 1\n")
    assert "unknown key 'plans.nightly'" in msg


def test_bad_values(tmp_path):
    assert "'trip_c' (90) must be below 'max_c' (85)" in _refused(
        tmp_path, GOOD.replace("trip_c = 80", "trip_c = 90")
    )
    assert "unknown value 'tensorrt'" in _refused(
        tmp_path, GOOD.replace('runtimes = ["onnxruntime"]', 'runtimes = ["tensorrt"]')
    )
    assert "field 'architecture'" in _refused(tmp_path, GOOD.replace('"aarch64"', '"riscv64"'))
    assert "field 'name' must look like 'vendor/board'" in _refused(
        tmp_path, GOOD.replace('"lab/pi"', '"Lab Pi"')
    )
    assert "'plans.quick.cold_runs' must be > 0" in _refused(
        tmp_path, GOOD.replace("cold_runs = 3", "cold_runs = 0")
    )
    assert "not valid TOML" in _refused(tmp_path, "name = ")


def test_unknown_name_and_missing_file(tmp_path):
    with pytest.raises(ProfileError, match="unknown device profile 'raspberry-pi/6'") as e:
        load_profile("raspberry-pi/6")
    assert "raspberry-pi/5" in e.value.hint
    with pytest.raises(ProfileError, match="cannot read profile"):
        load_profile(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("model", "arch", "expected"),
    [
        ("Raspberry Pi 5 Model B Rev 1.0", "aarch64", "raspberry-pi/5"),
        ("Raspberry Pi 500 Rev 1.0", "aarch64", "raspberry-pi/5"),
        ("Raspberry Pi 4 Model B Rev 1.4", "aarch64", "raspberry-pi/4b"),
        ("Raspberry Pi 4 Model B Rev 1.4", "armv7l", "raspberry-pi/4b"),
        ("Raspberry Pi 3 Model B Plus Rev 1.3", "aarch64", "raspberry-pi/3b-plus"),
        ("Raspberry Pi Zero 2 W Rev 1.0", "aarch64", "raspberry-pi/zero-2w"),
        ("NVIDIA Jetson Nano Developer Kit", "aarch64", "nvidia/jetson-nano"),
        ("NVIDIA Jetson Orin Nano Developer Kit", "aarch64", "nvidia/jetson-orin-nano"),
        (
            "NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
            "aarch64",
            "nvidia/jetson-orin-nx",
        ),
        ("Jetson AGX Orin Developer Kit", "aarch64", "nvidia/jetson-agx-orin"),
        ("NVIDIA Jetson Xavier NX Developer Kit", "aarch64", "nvidia/jetson-xavier-nx"),
        ("Radxa ROCK 5B", "aarch64", "generic/linux-aarch64"),
        (None, "arm64", "generic/linux-aarch64"),
        (None, "x86_64", "generic/linux-x86_64"),
        ("Intel(R) Client Systems NUC11TNHi5", "AMD64", "generic/linux-x86_64"),
    ],
)
def test_match_profile(model, arch, expected):
    assert match_profile({"board_model": model, "architecture": arch}).name == expected


def test_match_longest_string_wins():
    profiles = all_profiles()
    base = load_profile("raspberry-pi/5")
    specific = DeviceProfile(
        **{**base.__dict__, "name": "lab/pi5-16gb", "match": ("Raspberry Pi 5 Model B Rev 1.1",)}
    )
    got = match_profile(
        {"board_model": "Raspberry Pi 5 Model B Rev 1.1", "architecture": "aarch64"},
        [*profiles, specific],
    )
    assert got.name == "lab/pi5-16gb"


def test_no_match():
    with pytest.raises(ProfileError, match="no device profile matches") as e:
        match_profile({"board_model": "SiFive HiFive Unmatched A00", "architecture": "riscv64"})
    assert "--profile" in e.value.hint


def test_match_recorded_fingerprints(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert match_profile(fingerprint(SYSFS / "pi4")).name == "raspberry-pi/4b"
    assert match_profile(fingerprint(SYSFS / "pi5")).name == "raspberry-pi/5"
    assert match_profile(fingerprint(SYSFS / "jetson-orin-nano")).name == "nvidia/jetson-orin-nano"
    assert match_profile(fingerprint(SYSFS / "jetson-nano")).name == "nvidia/jetson-nano"
