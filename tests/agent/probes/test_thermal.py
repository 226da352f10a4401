"""Thermal zones: parsing, unreliable zones, trip lookup, recorded board trees."""

from __future__ import annotations

from pathlib import Path

from edgequal.agent.probes.thermal import (
    is_junction_zone,
    is_unreliable_zone,
    parse_millidegrees,
    parse_trip_points,
    parse_zone,
    read_thermal,
    read_zone_temp_c,
    summarize_zones,
    trip_lookup,
)

SYSFS = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"


def test_parse_millidegrees():
    assert parse_millidegrees("54530\n") == 54.53
    assert parse_millidegrees("-256000") == -256.0
    assert parse_millidegrees("") is None
    assert parse_millidegrees(None) is None
    assert parse_millidegrees("N/A") is None


def test_unreliable_and_junction_names():
    assert is_unreliable_zone("PMIC-Die")
    assert is_unreliable_zone("pmic-thermal")
    assert not is_unreliable_zone("CPU-therm")
    assert not is_unreliable_zone(None)
    assert is_junction_zone("tj-thermal")
    assert is_junction_zone("Tj")
    assert not is_junction_zone("thermal-fan-est")


def test_parse_trip_points_sorted_and_partial():
    trips = parse_trip_points(
        {
            "trip_point_10_temp": "120000",
            "trip_point_1_temp": "104500",
            "trip_point_1_type": "critical",
            "trip_point_0_temp": "99000",
            "trip_point_0_type": "passive\n",
            "trip_point_0_hyst": "2000",
            "temp": "1",
        }
    )
    assert [t["index"] for t in trips] == [0, 1, 10]
    assert trips[0] == {"index": 0, "temp_c": 99.0, "type": "passive", "hyst_c": 2.0}
    assert trips[1]["type"] == "critical" and trips[1]["hyst_c"] is None
    assert trips[2] == {"index": 10, "temp_c": 120.0, "type": None, "hyst_c": None}


def test_parse_zone_reasons():
    assert parse_zone("z", {"type": "cpu", "temp": None})["reason"] == "temp unreadable"
    assert parse_zone("z", {"type": "cpu", "temp": "\n"})["reason"] == "temp empty"
    zero = parse_zone("z", {"type": "cpu", "temp": "0"})
    assert zero["temp_c"] is None and "reads 0" in zero["reason"]
    hot = parse_zone("z", {"type": "cpu", "temp": "200000"})
    assert hot["temp_c"] is None and "implausible" in hot["reason"]
    offline = parse_zone("z", {"type": "cv0-thermal", "temp": "-256000"})
    assert offline["temp_c"] is None
    pmic = parse_zone("z", {"type": "PMIC-Die", "temp": "100000"})
    assert pmic["temp_c"] == 100.0 and pmic["unreliable"] and "PMIC" in pmic["reason"]
    ok = parse_zone("thermal_zone3", {"type": "soc0-thermal", "temp": "41200\n"})
    assert ok == {
        "name": "thermal_zone3",
        "type": "soc0-thermal",
        "temp_c": 41.2,
        "unreliable": False,
        "reason": None,
        "trips": [],
    }


def _zone(t, temp, trips=(), unreliable=False):
    return {
        "name": t,
        "type": t,
        "temp_c": temp,
        "unreliable": unreliable,
        "reason": None,
        "trips": [
            {"index": i, "temp_c": c, "type": ty, "hyst_c": None} for i, (c, ty) in enumerate(trips)
        ],
    }


def test_trip_lookup_lowest_passive_or_hot_and_critical():
    zones = [
        _zone("a", 40.0, [(99.0, "passive"), (104.5, "critical")]),
        _zone("b", 41.0, [(95.0, "hot"), (85.0, "active"), (110.0, "critical")]),
        _zone("PMIC-Die", 100.0, [(50.0, "passive"), (60.0, "critical")], unreliable=True),
    ]
    assert trip_lookup(zones) == {
        "trip_c": 95.0,
        "trip_zone": "b",
        "critical_c": 104.5,
        "critical_zone": "a",
    }
    # Active (fan) trips are not throttle points.
    assert trip_lookup([_zone("cpu", 50.0, [(50.0, "active")])])["trip_c"] is None


def test_summary_prefers_junction_and_skips_unreliable():
    zones = [
        _zone("cpu-thermal", 43.0),
        _zone("gpu-thermal", 47.0),
        _zone("tj-thermal", 45.0),
        _zone("PMIC-Die", 100.0, unreliable=True),
        _zone("cv0-thermal", None),
    ]
    s = summarize_zones(zones)
    assert s["max_temp_c"] == 47.0 and s["max_zone"] == "gpu-thermal"
    assert s["authoritative_temp_c"] == 45.0 and s["authoritative_zone"] == "tj-thermal"
    s = summarize_zones(zones[:2])
    assert s["authoritative_temp_c"] == 47.0 and s["authoritative_zone"] == "gpu-thermal"
    assert summarize_zones([])["authoritative_temp_c"] is None


def test_pi4_tree():
    t = read_thermal(SYSFS / "pi4")
    assert t["available"] and t["reason"] is None
    assert [(z["name"], z["type"], z["temp_c"]) for z in t["zones"]] == [
        ("thermal_zone0", "cpu-thermal", 54.53)
    ]
    assert t["authoritative_temp_c"] == 54.53
    # The Pi firmware throttles; Linux has only a critical trip.
    assert t["trip_c"] is None and t["critical_c"] == 110.0
    assert t["cooling_devices"] == []


def test_pi5_tree_fan_trips_and_cooling_device():
    t = read_thermal(SYSFS / "pi5")
    zone = t["zones"][0]
    assert [(tp["temp_c"], tp["type"]) for tp in zone["trips"]] == [
        (110.0, "critical"),
        (50.0, "active"),
        (60.0, "active"),
        (67.5, "active"),
        (75.0, "active"),
    ]
    assert all(tp["hyst_c"] == 5.0 for tp in zone["trips"][1:])
    assert t["trip_c"] is None and t["critical_c"] == 110.0
    assert t["cooling_devices"] == [
        {"name": "cooling_device0", "type": "pwm-fan", "cur_state": 1, "max_state": 4}
    ]
    assert t["authoritative_temp_c"] == 50.15


def test_orin_nano_tree_tj_authoritative_cv_unreadable():
    t = read_thermal(SYSFS / "jetson-orin-nano")
    types = [z["type"] for z in t["zones"]]
    assert types == [
        "cpu-thermal",
        "gpu-thermal",
        "cv0-thermal",
        "cv1-thermal",
        "cv2-thermal",
        "soc0-thermal",
        "soc1-thermal",
        "soc2-thermal",
        "tj-thermal",
    ]
    cv = [z for z in t["zones"] if z["type"].startswith("cv")]
    assert all(z["temp_c"] is None and z["reason"] == "temp unreadable" for z in cv)
    assert t["authoritative_zone"] == "tj-thermal" and t["authoritative_temp_c"] == 43.5
    assert t["max_temp_c"] == 43.5
    assert t["trip_c"] == 99.0 and t["trip_zone"] == "cpu-thermal"
    assert t["critical_c"] == 104.5


def test_nano_tree_pmic_die_kept_out_of_max():
    t = read_thermal(SYSFS / "jetson-nano")
    pmic = next(z for z in t["zones"] if z["type"] == "PMIC-Die")
    assert pmic["temp_c"] == 100.0 and pmic["unreliable"]
    assert t["max_temp_c"] == 36.5 and t["max_zone"] == "AO-therm"
    assert t["authoritative_temp_c"] == 36.5
    assert t["critical_c"] == 102.5 and t["critical_zone"] == "GPU-therm"


def test_missing_class_and_oserror(tmp_path):
    t = read_thermal(tmp_path)
    assert not t["available"] and "no thermal zones" in t["reason"]
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    (zone / "temp").mkdir(parents=True)  # reading a directory raises IsADirectoryError
    (zone / "type").write_text("cpu-thermal\n")
    t = read_thermal(tmp_path)
    assert not t["available"] and t["reason"] == "no thermal zone has a usable reading"
    assert t["zones"][0]["reason"] == "temp unreadable"
    assert read_zone_temp_c(zone) is None


def test_zone_order_is_natural(tmp_path):
    for i in (10, 2, 1):
        z = tmp_path / f"sys/class/thermal/thermal_zone{i}"
        z.mkdir(parents=True)
        (z / "type").write_text(f"z{i}\n")
        (z / "temp").write_text(f"{30 + i}000\n")
    t = read_thermal(tmp_path)
    assert [z["name"] for z in t["zones"]] == ["thermal_zone1", "thermal_zone2", "thermal_zone10"]
    assert t["max_temp_c"] == 40.0
