"""The typed plan and worker job: JSON round trips and refusal of bad values by name."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from edgequal.agent.worker.jobs import (
    DivergenceSettings,
    SustainSettings,
    WorkerJob,
    latency_settings,
)
from edgequal.contract.errors import BadInput
from edgequal.contract.plan import PRESETS, Plan, make_plan


@pytest.mark.parametrize("preset", list(PRESETS))
def test_plan_json_round_trip(preset):
    plan = make_plan(preset, threads=2, providers=["CPUExecutionProvider"], shapes={"x": [1, 3]})
    wire = json.loads(json.dumps(plan.to_json()))
    assert Plan.from_json(wire) == plan
    assert wire["providers"] == ["CPUExecutionProvider"] and wire["shapes"] == {"x": [1, 3]}
    assert wire["preset"] == preset and wire["threads"] == 2


def test_plan_from_partial_json_fills_the_preset():
    plan = Plan.from_json({"preset": "standard", "sustain_s": 60})
    assert plan.cold_runs == 7 and plan.sustain_s == 60.0 and plan.sustain_window_s == 6.0
    assert make_plan("standard").sustain_window_s == 30.0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("latency_min_s", math.nan, "'latency_min_s' must be a finite number"),
        ("phase_timeout_s", math.inf, "'phase_timeout_s' must be a finite number"),
        ("sustain_s", 1e400, "'sustain_s' must be a finite number"),
        ("latency_max_runs", 20_000_000, "'latency_max_runs' is 2e+07; the most"),
        ("cold_runs", "3", "'cold_runs' must be a number"),
        ("cooldown", "yes", "'cooldown' must be true or false"),
        ("providers", "CUDA", "'providers' must be a list"),
        ("bogus", 1, "unknown plan field 'bogus'"),
    ],
)
def test_plan_refuses_bad_values_by_name(field, value, message):
    with pytest.raises(BadInput) as e:
        Plan.from_json({field: value})
    assert message in str(e.value)


def test_a_plan_must_be_an_object():
    with pytest.raises(BadInput, match="JSON object"):
        Plan.from_json([1, 2])


def test_worker_job_round_trip(tmp_path):
    plan = make_plan("quick", threads=1, shapes={"image": [1, 3, 8, 8]})
    for job in (
        WorkerJob.for_phase("cold_load", tmp_path / "m.onnx", None, plan, "onnxruntime"),
        WorkerJob.for_phase(
            "warm",
            tmp_path / "m.onnx",
            tmp_path / "g.npz",
            plan,
            "litert",
            latency=latency_settings(plan),
        ),
        WorkerJob.for_phase(
            "sustained",
            tmp_path / "m.onnx",
            None,
            plan,
            "onnxruntime",
            sustain=SustainSettings(duration_s=10.0, window_s=1.0),
        ),
        replace(
            WorkerJob.for_phase(
                "divergence",
                tmp_path / "m.tflite",
                tmp_path / "g.npz",
                plan,
                "litert",
                divergence=DivergenceSettings(
                    case="c1",
                    reference={
                        "graph_optimization": "all",
                        "providers": None,
                        "op_resolver": "builtin-ref",
                    },  # fmt: skip
                    reference_label="the reference path resolver:builtin-ref",
                    budget_bytes=1 << 20,
                ),
            ),
            op_resolver="auto",
        ),
    ):
        wire = json.loads(json.dumps(job.to_json()))
        assert WorkerJob.from_json(wire) == job
    assert job.runtime_options().threads == 1
    assert latency_settings(plan).min_runs == plan.latency_min_runs == 200


def test_unknown_job_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown worker job kind 'measure'"):
        WorkerJob.for_phase("measure", tmp_path / "m", None, make_plan(), "onnxruntime")


def test_scenario_settings_travel_in_the_worker_job():
    from edgequal.agent.worker.jobs import ScenarioSettings

    plan = make_plan("standard", server_rate_per_s=120.0, server_p99_ms=15.0)
    settings = ScenarioSettings.from_plan(plan)
    assert settings.batch_sizes == (1, 2, 4, 8, 16) and settings.server_rate_per_s == 120.0
    job = WorkerJob.for_phase("server", "m.onnx", None, plan, "onnxruntime", scenario=settings)
    wire = json.loads(json.dumps(job.to_json()))
    assert WorkerJob.from_json(wire) == job
    assert wire["scenario"]["batch_sizes"] == [1, 2, 4, 8, 16]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("batch_sizes", [0, 2], "sizes must be 1..4096"),
        ("batch_sizes", [], "non-empty list"),
        ("batch_sizes", [True], "non-empty list"),
        ("batch_sizes", list(range(1, 18)), "at most 16"),
        ("server_callers", 0, "'server_callers' must be at least 1"),
        ("server_callers", 65, "the most a plan may ask for is 64"),
        ("server_p99_ms", 0, "'server_p99_ms' must be positive"),
        ("scenario_s", math.nan, "'scenario_s' must be a finite number"),
        ("server", "yes", "'server' must be true or false"),
    ],
)
def test_scenario_fields_are_validated_and_bounded(field, value, message):
    with pytest.raises(BadInput) as e:
        Plan.from_json({field: value})
    assert message in str(e.value)


def test_batch_sizes_are_kept_sorted_and_distinct():
    assert make_plan("quick", batch_sizes=[8, 1, 8, 2]).batch_sizes == (1, 2, 8)
