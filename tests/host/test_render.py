"""The host's rendering: every section of a real measurement prints, absent sensors say so."""

from __future__ import annotations

from edgequal.agent.plan import make_plan
from edgequal.agent.qualification import run_measurement
from edgequal.host import render


def test_sparkline_maps_lowest_to_highest():
    assert render.sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert render.sparkline([5, 5, 5]) == "███"
    assert render.sparkline([10, 0]) == "█▁"


def test_summary_of_a_real_measurement_with_sustained_and_drift(
    example_models, golden_sets, tmp_path, capsys
):
    plan = make_plan(
        "quick",
        cold_runs=1,
        warmup_min_s=0.05,
        warmup_max_s=0.5,
        latency_min_runs=50,
        latency_min_s=0.1,
        sustain_s=2.0,
        window_s=1.0,
    )
    out = run_measurement(
        example_models["classifier"], golden_sets["classifier"], plan, root=tmp_path
    )
    predicate = {**out, "run_id": "20261130T000000Z-00000000"}
    render.print_summary(predicate, "local", "r.json")
    text = capsys.readouterr().out
    for expected in (
        "Cold load",
        "Warm latency",
        "Output drift",
        "decisions 0 flips in 12 cases",
        "Sustained (2 s, 1 s windows)",
        "throughput per window:",
        "temperatures are absent, not estimated",
        "signed report: r.json",
    ):
        assert expected in text, expected


def test_summary_of_a_rejected_model_names_the_operator(example_models, capsys):
    plan = make_plan("quick", cold_runs=1)
    out = run_measurement(example_models["unsupported_op"], None, plan)
    render.print_summary({**out, "run_id": "x"}, "local")
    text = capsys.readouterr().out
    assert "FAILED" in text
    assert "operator com.example:Frobnicate" in " ".join(text.split())
