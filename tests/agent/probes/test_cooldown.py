"""The cooldown wait before the sustained phase, on scripted temperature readings."""

from __future__ import annotations

import itertools

from edgequal.agent.probes.cooldown import wait_for_cooldown


def test_settled_near_idle_is_reached():
    temps = itertools.chain([47.0], itertools.repeat(46.0))  # 1 °C over idle, flat
    r = wait_for_cooldown(
        lambda: next(temps), idle_c=45.0, timeout_s=5.0, interval_s=0.02, min_span_s=0.2
    )
    assert r["reached"] is True and r["idle_c"] == 45.0 and r["temp_c"] == 46.0
    assert 0.2 <= r["waited_s"] < 5.0


def test_still_hot_times_out_and_says_so():
    r = wait_for_cooldown(lambda: 70.0, idle_c=45.0, timeout_s=0.3, interval_s=0.02, min_span_s=0.1)
    assert r["reached"] is False
    assert r["reason"] == "cooldown timeout after 0.3 s"


def test_rising_temperature_is_not_cool_even_near_idle():
    counter = itertools.count()
    r = wait_for_cooldown(
        lambda: 45.0 + 0.05 * next(counter),
        idle_c=45.0,
        timeout_s=0.3,
        interval_s=0.02,
        min_span_s=0.1,
    )
    assert r["reached"] is False  # rising far faster than 0.5 °C/min


def test_no_sensor_waits_for_nothing():
    r = wait_for_cooldown(lambda: None, idle_c=None, timeout_s=60.0)
    assert r == {"waited_s": 0.0, "reached": None, "reason": "no temperature sensor"}
