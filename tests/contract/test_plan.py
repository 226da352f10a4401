"""The plan's layers (preset, device profile, flags) and the provenance it keeps of them."""

from __future__ import annotations

import json

import pytest
from edgequal.contract.errors import BadInput
from edgequal.contract.plan import PRESETS, Plan, duration_text, make_plan

BOARD = {
    "profile": "lab/board",
    "threads": 4,
    "trip_c": 80.0,
    "max_temp_c": 85.0,
    "throttle_indicators": ["clock_drop"],
    "window_s": 30.0,
}


def test_sources_name_the_preset_profile_and_flag_fields():
    plan = make_plan("standard", BOARD, threads=2, sustain_s=120.0)
    sources = plan.sources
    # Every field of the preset's table, unless a later layer set it.
    for key in set(PRESETS["standard"]) - {"sustain_s"}:
        assert sources[key] == "preset", key
    assert sources["sustain_s"] == "flag" and sources["threads"] == "flag"
    assert {sources[k] for k in ("profile", "trip_c", "max_temp_c", "throttle_indicators")} == {
        "profile"
    }
    # A flag's sustained length drops the profile's window (chosen for the preset's length).
    assert "window_s" not in sources and plan.sustain_window_s == 12.0
    # A field no layer set has the plan's default and is not named.
    assert "seed" not in sources and "preset" not in sources and "sources" not in sources


def test_a_profile_window_on_a_plan_without_a_sustained_phase_is_dropped():
    plan = make_plan("quick", BOARD)
    assert plan.sustain_s == 0.0 and plan.window_s is None and "window_s" not in plan.sources
    assert plan.threads == 4 and plan.sources["threads"] == "profile"


def test_a_plan_without_layers_has_only_preset_sources():
    assert set(make_plan("quick").sources.values()) == {"preset"}
    assert Plan.from_json({}).sources == {}  # a bare plan JSON names no origin


@pytest.mark.parametrize("preset", list(PRESETS))
def test_sources_survive_the_json_round_trip(preset):
    plan = make_plan(preset, BOARD, sustain_s=30.0, shapes={"x": [1, 3]})
    wire = json.loads(json.dumps(plan.to_json()))
    assert wire["sources"]["sustain_s"] == "flag" and wire["sources"]["trip_c"] == "profile"
    assert wire["sources"]["cold_runs"] == "preset"
    again = Plan.from_json(wire)
    assert again == plan and again.sources == plan.sources


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        (["threads"], "'sources' must map plan fields"),
        ({"thread": "flag"}, "'sources' names 'thread', which is no plan field"),
        ({"sources": "flag"}, "names 'sources', which is no plan field"),
        ({"threads": "cli"}, "'sources.threads' is 'cli'; use one of: preset, profile, flag"),
        ({"threads": None}, "'sources.threads' is 'None'"),
    ],
)
def test_bad_sources_are_refused_by_name(sources, message):
    with pytest.raises(BadInput) as e:
        Plan.from_json({"sources": sources})
    assert message in str(e.value)


def test_make_plan_records_sources_itself():
    with pytest.raises(BadInput, match="'sources' is recorded by make_plan"):
        make_plan("quick", sources={"threads": "flag"})
    with pytest.raises(BadInput, match="a device profile may not set plan field 'cold_runs'"):
        make_plan("quick", {"cold_runs": 9})


@pytest.mark.parametrize(
    ("seconds", "text"), [(3.0, "3 s"), (90.0, "90 s"), (600.0, "10 min"), (150.0, "150 s")]
)
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text


def test_timed_s_adds_the_phases_a_plan_times():
    from edgequal.contract.plan import make_plan

    plan = make_plan("quick", warmup_min_s=1.0, latency_min_s=3.0, sustain_s=60.0)
    assert plan.timed_s() == 64.0
    two = make_plan(
        "quick",
        warmup_min_s=1.0,
        latency_min_s=3.0,
        sustain_s=0,
        shapes={"a": [1, 2], "b": [1, 3]},
        batch_sizes=[1, 2, 4],
        scenario_s=2.0,
    )
    assert two.timed_s() == 2 * (1.0 + 3.0) + 3 * 2.0


def test_latency_max_extension_defaults_to_three_and_refuses_less_than_one():
    assert make_plan("quick").latency_max_extension == 3.0
    plan = make_plan("quick", latency_max_extension=5.0)
    assert plan.latency_max_extension == 5.0 and plan.sources["latency_max_extension"] == "flag"
    assert Plan.from_json(plan.to_json()) == plan
    with pytest.raises(BadInput, match="latency_max_extension' must be at least 1"):
        make_plan("quick", latency_max_extension=0.5)


def test_repeat_defaults_to_one_and_refuses_zero():
    assert make_plan("quick").repeat == 1
    assert make_plan("quick", repeat=3).repeat == 3
    with pytest.raises(BadInput, match="'repeat' must be at least 1"):
        make_plan("quick", repeat=0)
    with pytest.raises(BadInput, match="the most a plan may ask for is 20"):
        make_plan("quick", repeat=21)


def test_timed_s_counts_every_repeated_run():
    once = make_plan("quick", sustain_s=10.0)
    assert make_plan("quick", sustain_s=10.0, repeat=3).timed_s() == pytest.approx(
        3 * once.timed_s()
    )
