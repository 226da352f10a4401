"""Device profiles: every packaged file loads, strict validation, matching by fingerprint,
and what a profile sets in a plan (board fields, never a phase)."""

from __future__ import annotations

from pathlib import Path

import pytest
from edgequal.agent.probes.fingerprint import fingerprint
from edgequal.contract.plan import Plan, make_plan
from edgequal.host.devices.profiles import (
    DeviceProfile,
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

[plans.standard]
window_s = 20

[plans.soak]
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
        assert p.windows == {"standard": 30.0, "soak": 30.0}
        assert 1 <= p.default_threads <= p.cores
        assert p.is_generic == p.name.startswith("generic/")


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
    assert p.windows == {"standard": 20.0, "soak": 30.0}
    assert p.to_dict()["match"] == ["Lab Pi"]
    assert p.to_dict()["windows"] == {"standard": 20.0, "soak": 30.0}
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


def test_missing_plan_window_and_plans(tmp_path):
    assert "missing field 'plans.soak.window_s'" in _refused(
        tmp_path, GOOD[: GOOD.rindex("window_s")]
    )
    # A plan table, or all of them, may be left out: the plan's own window rule applies.
    no_soak = load_profile(_write(tmp_path, GOOD[: GOOD.index("[plans.soak]")]))
    assert no_soak.windows == {"standard": 20.0}
    assert load_profile(_write(tmp_path, GOOD[: GOOD.index("[plans.")])).windows == {}


def test_a_profile_sets_no_phase_length(tmp_path):
    # The earlier format's durations are refused with the reason, not taken as typos.
    msg = _refused(tmp_path, GOOD.replace("window_s = 20", "sustain_s = 600.0\nwindow_s = 20"))
    assert "'plans.standard.sustain_s': a profile sets no phase length" in msg
    msg = _refused(tmp_path, GOOD.replace("window_s = 20", "cold_runs = 7\nwindow_s = 20"))
    assert "'plans.standard.cold_runs': a profile sets no phase length" in msg
    # A whole profile of that format: the first phase length is named, with what to keep.
    earlier = GOOD[: GOOD.index("[plans.")] + "[plans.quick]\ncold_runs = 3\nsustain_s = 60.0\n"
    path = _write(tmp_path, earlier)
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert "'plans.quick.cold_runs': a profile sets no phase length" in str(e.value)
    assert "keep only window_s, under [plans.standard] and [plans.soak]" in e.value.hint
    # quick runs no sustained phase: there is no window of it to set.
    msg = _refused(tmp_path, GOOD + "\n[plans.quick]\nwindow_s = 6.0\n")
    assert "plan quick runs no sustained phase, so 'plans.quick' has nothing to set" in msg


def test_wrong_type(tmp_path):
    msg = _refused(tmp_path, GOOD.replace("cores = 4", 'cores = "four"'))
    assert "field 'cores' must be an integer, got string 'four'" in msg
    msg = _refused(tmp_path, GOOD.replace("cores = 4", "cores = true"))
    assert "field 'cores' must be an integer, got boolean True" in msg
    msg = _refused(tmp_path, GOOD.replace('match = ["Lab Pi"]', 'match = "Lab Pi"'))
    assert "field 'match' must be a list of strings" in msg
    msg = _refused(tmp_path, GOOD.replace("window_s = 20\n", 'window_s = "20s"\n'))
    assert "field 'plans.standard.window_s' must be a number" in msg


def test_unknown_key(tmp_path):
    msg = _refused(tmp_path, GOOD.replace("cores = 4", "cores = 4\ntrip = 80"))
    assert "unknown key 'trip'" in msg
    msg = _refused(tmp_path, GOOD.replace("window_s = 20", "window_s = 20\nwarmup_s = 1"))
    assert "unknown key 'plans.standard.warmup_s'" in msg
    msg = _refused(tmp_path, GOOD + "\n[plans.nightly]\nwindow_s = 1\n")
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
    assert "'plans.standard.window_s' must be 1 s to plan standard's sustained 600 s, got 0" in (
        _refused(tmp_path, GOOD.replace("window_s = 20", "window_s = 0"))
    )
    assert "got 3600" in _refused(tmp_path, GOOD.replace("window_s = 20", "window_s = 3600"))
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


# -- what a profile sets in a plan ------------------------------------------------


def test_a_profile_never_adds_a_sustained_phase_to_quick():
    """The generic x86-64 profile on quick: threads and trip from the board, no sustained phase."""
    board = load_profile("generic/linux-x86_64")
    plan = make_plan("quick", board.plan_fields("quick"))
    assert plan.sustain_s == 0.0 and plan.window_s is None
    assert (plan.cold_runs, plan.latency_min_runs, plan.latency_min_s) == (3, 200, 3.0)
    assert plan.threads == 2 and plan.trip_c == 85.0 and plan.max_temp_c == 95.0
    assert plan.throttle_indicators == ("clock_drop", "cooling_device", "passive_trip")
    assert plan.profile == "generic/linux-x86_64"
    assert plan.sources["sustain_s"] == "preset" and plan.sources["cold_runs"] == "preset"
    assert {k: plan.sources[k] for k in ("threads", "trip_c", "max_temp_c", "profile")} == {
        "threads": "profile",
        "trip_c": "profile",
        "max_temp_c": "profile",
        "profile": "profile",
    }
    assert "window_s" not in plan.sources


def test_a_profile_keeps_the_preset_lengths_and_sets_its_window(tmp_path):
    board = load_profile(_write(tmp_path, GOOD))
    plan = make_plan("standard", board.plan_fields("standard"))
    assert (plan.cold_runs, plan.latency_min_s, plan.sustain_s) == (7, 60.0, 600.0)
    assert plan.sustain_window_s == 20.0 and plan.sources["window_s"] == "profile"
    assert plan.threads == 3 and plan.trip_c == 80.0


def test_a_flag_still_adds_a_sustained_phase_and_wins_over_the_profile():
    board = load_profile("generic/linux-x86_64")
    plan = make_plan("quick", board.plan_fields("quick"), sustain_s=10.0, threads=1)
    assert plan.sustain_s == 10.0 and plan.sustain_window_s == 1.0
    assert plan.sources["sustain_s"] == "flag" and plan.sources["threads"] == "flag"
    assert plan.threads == 1 and plan.trip_c == 85.0 and plan.sources["trip_c"] == "profile"
    # The profile's window was chosen for standard's 10 min: a flag's 90 s gets its own.
    short = make_plan("standard", board.plan_fields("standard"), sustain_s=90.0)
    assert short.sustain_window_s == 9.0 and "window_s" not in short.sources
    # The provenance is part of the plan's JSON and comes back from it.
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.to_json()["sources"]["sustain_s"] == "flag"


def test_a_profile_may_set_only_board_fields():
    from edgequal.contract.errors import BadInput

    with pytest.raises(BadInput, match="a device profile may not set plan field 'sustain_s'"):
        make_plan("quick", {"threads": 2, "sustain_s": 60.0})
    assert set(load_profile("raspberry-pi/5").plan_fields("soak")) == {
        "profile",
        "threads",
        "trip_c",
        "max_temp_c",
        "throttle_indicators",
        "window_s",
    }
