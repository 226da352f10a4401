"""The board-family registry: every list of board families derives from ``BOARD_FAMILIES``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from edgequal.contract.board_families import BOARD_FAMILIES, BOARD_FAMILY_NAMES, board_family
from edgequal.host.judge.baseline import change_category

DOC = Path(__file__).resolve().parents[2] / "docs" / "probes.md"


def test_the_docs_table_of_board_families_is_the_registry():
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| (.+) \| (.+) \|$", DOC.read_text(), re.M)
    documented = {name: (fields, line) for name, fields, line in rows if name in BOARD_FAMILY_NAMES}
    assert documented == {
        f.name: (", ".join(f"`{k}`" for k in f.fields), f.docs) for f in BOARD_FAMILIES
    }


def test_names_and_lookup():
    assert BOARD_FAMILY_NAMES == ("raspberry_pi", "jetson")
    assert board_family("jetson").fields["nvpmodel"] == "power mode"
    with pytest.raises(KeyError):
        board_family("beaglebone")


@pytest.mark.parametrize(
    ("key", "category"),
    [
        ("jetson.l4t.version", "firmware"),
        ("jetson.nvpmodel.mode", "power mode"),
        ("jetson.jetson_clocks.gpu.max_hz", "clocks"),
        ("raspberry_pi.get_throttled.raw", "throttle state"),
        ("raspberry_pi.get_throttled_source", "throttle state"),
        ("clocks.max_clock_khz", "clocks"),
        ("board_model", "board"),
    ],
)
def test_a_changed_field_is_named_by_its_familys_category(key, category):
    assert change_category(key) == category


def test_category_of_reads_only_its_own_section():
    pi, jetson = (board_family(n) for n in BOARD_FAMILY_NAMES)
    assert pi.category_of("jetson.nvpmodel.mode") is None
    assert jetson.category_of("jetson.gpu.cur_hz") is None  # read by info, not fingerprinted
    assert jetson.category_of("jetson_clocks") is None  # a top-level key, not the section


def test_a_familys_throttle_hook_is_whole_and_read_by_the_plan_and_the_sampler():
    """A family that brings throttle flags declares every part of its hook: the sample key
    its probe's ``telemetry_reader`` fills, the indicator a plan may list, the rules."""
    import importlib

    from edgequal.contract.plan import THROTTLE_INDICATORS

    hooked = [f for f in BOARD_FAMILIES if f.throttle_indicator]
    assert [f.name for f in hooked] == ["raspberry_pi"]
    for f in BOARD_FAMILIES:
        module = importlib.import_module(f"edgequal.agent.probes.{f.name}")
        assert callable(getattr(module, "telemetry_reader", None)) == bool(f.telemetry_fields)
        if f.throttle_indicator:
            assert f.throttle_indicator in THROTTLE_INDICATORS
            assert f.throttle_field in f.telemetry_fields and f.throttle_active is not None
        if f.measured_clock_field:
            assert f.measured_clock_field in f.telemetry_fields


def test_the_throttle_rule_reads_the_familys_flags():
    from edgequal.agent.measure.throttle import firmware_throttles, throttle_reasons, under_voltage
    from edgequal.agent.probes.raspberry_pi import parse_throttled

    capped = {"throttled": parse_throttled("0x2"), "arm_clock_khz": 600_000}
    assert firmware_throttles(capped) == ["get_throttled"]
    reasons = throttle_reasons(capped, nominal_khz={"policy0": 1_500_000})
    assert reasons == ["get_throttled", "clock_drop"]  # the firmware-measured clock dropped
    assert not under_voltage(capped) and under_voltage({"throttled": parse_throttled("0x1")})
    assert firmware_throttles({"throttled": None}) == [] == firmware_throttles({})
