"""The whole path's timing summary and the attribution of a preprocessing difference:
pure functions on literal values."""

from __future__ import annotations

import numpy as np
from edgequal.agent.measure.latency import LatencySettings
from edgequal.agent.measure.pipeline import measure_path, summarize_path, time_path_ns
from edgequal.agent.measure.preprocessing import compare_inputs, divergence_message, likely_cause


def test_stage_summaries_and_shares_from_the_clock_at_each_boundary():
    # Two runs; stages of 1, 2, 7 ms and 3, 2, 5 ms (ns clock readings at the boundaries).
    ms = 1_000_000
    boundaries = np.array([[0, 1, 3, 10], [100, 103, 105, 110]], dtype=np.int64) * ms
    out = summarize_path(boundaries, ["decode", "preprocess", "inference"], cases=2)
    assert out["runs"] == 2 and out["cases"] == 2
    assert out["stages"]["decode"]["mean_ms"] == 2.0
    assert out["stages"]["preprocess"]["p50_ms"] == 2.0
    assert out["stages"]["inference"]["max_ms"] == 7.0
    assert out["stages"]["decision"] is None and out["share"]["decision"] is None
    assert out["end_to_end"]["mean_ms"] == 10.0
    # Shares: 4/20, 4/20, 12/20 of the summed end-to-end time.
    assert out["share"] == {"decode": 0.2, "preprocess": 0.2, "inference": 0.6, "decision": None}


def test_the_loop_feeds_each_stage_what_the_one_before_returned_cases_in_turn():
    seen = []
    buf = np.zeros((7, 3), dtype=np.int64)
    n = time_path_ns(["a", "b", "c"], [str.upper, seen.append], buf, 7, 0.0, None)
    assert n == 7 and seen == ["A", "B", "C", "A", "B", "C", "A"]
    assert (np.diff(buf, axis=1) >= 0).all()


def test_measure_path_warms_up_then_times_the_planned_runs():
    settings = LatencySettings(5, 0.0, 0.2, min_runs=30, min_s=0.0, max_runs=1000)
    out = measure_path([1, 2], {"decode": abs, "preprocess": float}, settings)
    assert out["runs"] >= 30 and out["warmup"]["runs"] >= 5
    assert out["stages"]["decode"]["count"] == out["end_to_end"]["count"] == out["runs"]
    assert out["stages"]["inference"] is None


def test_the_swap_that_makes_the_device_tensor_match_is_named():
    rng = np.random.default_rng(0)
    device = rng.random((1, 3, 4, 4)).astype(np.float32)
    reference = device[:, ::-1].copy()
    variants = [
        ("channels swapped", "color_order", device[:, ::-1]),
        ("range 0–255 vs 0–1 (no ÷255)", "scale", device * 255),
    ]
    cause = likely_cause(device, reference, variants, tolerance=1e-3)
    assert cause == {
        "label": "channels swapped",
        "key": "color_order",
        "max_abs": 0.0,
        "matches": True,
    }
    figures = compare_inputs([("c0", device, reference), ("c1", reference, reference)], 1e-3)
    assert figures["cases"] == 2 and figures["cases_over"] == 1 and figures["worst_case"] == "c0"
    assert figures["max_abs"] == float(np.abs(device.astype(np.float64) - reference).max())
    text = divergence_message("x", figures, cause)
    assert text == (
        f"input x: device preprocessing differs from the reference (max abs {figures['max_abs']:.3g} "
        "in 1 of 2 case(s); matches the reference with channels swapped: color_order?)"
    )


def test_a_transposed_reference_is_a_layout_and_an_unexplained_one_is_said_so():
    device = np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4)
    cause = likely_cause(device, device.transpose(0, 2, 3, 1), [], tolerance=0.0)
    assert cause["key"] == "layout" and cause["matches"] is True
    noise = device + 5.0
    assert likely_cause(device, noise, [("crop center", "crop", device - 3.0)], 0.01) is None
    closer = likely_cause(device, noise, [("resize bicubic", "interpolation", device + 4.0)], 0.01)
    assert closer == {
        "label": "resize bicubic",
        "key": "interpolation",
        "max_abs": 1.0,
        "matches": False,
    }
    figures = compare_inputs([("c0", device, device.transpose(0, 2, 3, 1))], 0.0)
    assert figures["max_abs"] is None and figures["shape_mismatch"]["reference"] == [1, 4, 4, 3]
    assert "shape 1x3x4x4 vs reference 1x4x4x3" in divergence_message("x", figures, None)
