"""Energy integration over known power samples (trapezoid, interpolated at the edges)."""

from __future__ import annotations

import pytest
from edgequal.agent.measure.energy import energy_j, energy_summary, idle_power, window_energy


def _samples(*pairs):
    return [{"t": t, "total_w": w} for t, w in pairs]


def test_energy_is_the_trapezoid_integral_clipped_to_the_span():
    s = _samples((0.0, 2.0), (1.0, 4.0), (2.0, 4.0), (3.0, 2.0))
    assert energy_j(s, 0.0, 3.0) == pytest.approx(3.0 + 4.0 + 3.0)
    # From 0.5 (3 W interpolated) to 2.5 (3 W): 0.5*3.5 + 4 + 0.5*3.5
    assert energy_j(s, 0.5, 2.5) == pytest.approx(7.5)
    assert energy_j(s, -0.1, 2.0) is None  # not bracketed: never extrapolated
    assert energy_j([{"t": 0.0, "total_w": None}, {"t": 1.0, "total_w": None}], 0.0, 1.0) is None


def test_idle_power_is_time_weighted():
    idle = idle_power(_samples((0.0, 1.0), (1.0, 1.0), (3.0, 2.0)))
    assert idle == {
        "watts": pytest.approx((1.0 + 3.0) / 3.0, abs=1e-6),
        "samples": 3,
        "span_s": 3.0,
    }
    assert idle_power([]) is None


def test_window_energy_per_inference_total_and_above_idle():
    s = _samples((0.0, 5.0), (1.0, 5.0), (2.0, 5.0))
    e = window_energy({"t0": 0.5, "t1": 1.5, "count": 250}, s, idle_w=2.0)
    assert e["power_w"] == pytest.approx(5.0) and e["energy_j"] == pytest.approx(5.0)
    assert e["mj_per_inference"] == pytest.approx(20.0)
    assert e["mj_per_inference_above_idle"] == pytest.approx(12.0)
    assert e["power_samples"] == 1
    absent = window_energy({"t0": 1.5, "t1": 2.5, "count": 10}, s, idle_w=2.0)
    assert absent["power_w"] is None and absent["mj_per_inference"] is None


def test_summary_is_the_median_over_full_windows():
    windows = [
        {"power_w": 5.0, "mj_per_inference": 20.0, "mj_per_inference_above_idle": 12.0},
        {"power_w": 6.0, "mj_per_inference": 24.0, "mj_per_inference_above_idle": 16.0},
        {"power_w": 7.0, "mj_per_inference": 30.0, "mj_per_inference_above_idle": None},
        {"power_w": 9.0, "mj_per_inference": 99.0, "partial": True},
    ]
    s = energy_summary(windows)
    assert s == {
        "windows": 3,
        "power_w_median": 6.0,
        "mj_per_inference_median": 24.0,
        "mj_per_inference_above_idle_median": 14.0,
    }
    assert energy_summary([{"power_w": None}]) is None
