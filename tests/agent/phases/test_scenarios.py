"""The service scenarios through the real worker and runtimes on real models the tests build:
batch sweep, thread scaling, the server scenario, operator diagnostics, provider refusal."""

from __future__ import annotations

import numpy as np
import pytest
from edgequal.agent.phases.qualification import planned_scenarios, run_measurement
from edgequal.contract.errors import BadInput
from edgequal.contract.plan import make_plan

from .test_qualification import assert_passed_or_explained

SCENARIO_S = 0.2


def scenario_plan(quick_plan, **overrides) -> dict:
    return quick_plan(cold_runs=1, scenario_s=SCENARIO_S, **overrides)


def build_matmul_heavy(path):
    """x [1,256] -> MatMul by a 256x256 weight, 16 times over -> Relu -> Add: MatMul dominates."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    nodes, inits, prev = [], [], "x"
    for i in range(16):
        w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        prev = f"m{i}"
    inits.append(numpy_helper.from_array(np.ones((1, 256), np.float32), "bias"))
    nodes += [
        helper.make_node("Relu", [prev], ["r"]),
        helper.make_node("Add", ["r", "bias"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "matmul_heavy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(model.SerializeToString())
    return path


def test_quick_runs_no_scenario_and_standard_runs_them_all():
    assert planned_scenarios(make_plan("quick")) == []
    assert [k for k, _ in planned_scenarios(make_plan("standard"))] == [
        "operators",
        "batch_sweep",
        "thread_scaling",
        "server",
    ]
    # An accelerator provider brings the operator phase: fallback is known from what ran where.
    accel = make_plan("quick", providers=["AzureExecutionProvider", "CPUExecutionProvider"])
    assert planned_scenarios(accel) == [("operators", "operators")]
    assert planned_scenarios(make_plan("quick", providers=["CPUExecutionProvider"])) == []


def test_a_provider_that_is_not_installed_is_refused_before_anything_runs(
    example_models, quick_plan
):
    events = []
    with pytest.raises(BadInput) as e:
        run_measurement(
            example_models["classifier"],
            None,
            quick_plan(providers=["CUDAExecutionProvider", "CPUExecutionProvider"]),
            on_event=events.append,
        )
    assert "execution provider CUDAExecutionProvider is not installed on this device" in str(
        e.value
    )
    assert "CPUExecutionProvider" in str(e.value)  # what it does offer
    assert events == []  # not even the fingerprint


def test_providers_on_a_litert_model_are_refused(example_models, quick_plan):
    with pytest.raises(BadInput, match="execution providers apply to onnxruntime"):
        run_measurement(
            example_models["classifier_tflite"],
            None,
            quick_plan(providers=["CPUExecutionProvider"]),
        )


@pytest.mark.slow
def test_batch_sweep_on_a_dynamic_batch_model(example_models, golden_sets, quick_plan):
    out = run_measurement(
        example_models["dynamic"],
        golden_sets["dynamic"],
        scenario_plan(quick_plan, batch_sizes=[1, 2, 8]),
    )
    assert_passed_or_explained(out)
    sweep = out["results"]["batch_sweep"]
    assert [p["batch"] for p in sweep["points"]] == [1, 2, 8]
    for p in sweep["points"]:
        # A larger batch never reports fewer items per call: the output has the batch's rows.
        assert p["items_per_call"] == p["batch"]
        assert p["calls"] >= 5 and p["p50_ms"] > 0 and p["p90_ms"] >= p["p50_ms"]
        assert p["items_per_s"] == pytest.approx(p["calls_per_s"] * p["batch"], rel=1e-3)
        assert p["items_per_s_per_core"] == pytest.approx(
            p["items_per_s"] / sweep["cores"], rel=1e-3
        )
    best = sweep["best"]
    assert best["items_per_s"] == max(p["items_per_s"] for p in sweep["points"])


@pytest.mark.slow
def test_a_fixed_batch_model_gets_a_one_line_reason(example_models, golden_sets, quick_plan):
    out = run_measurement(
        example_models["classifier_tflite"],
        golden_sets["classifier_tflite"],
        scenario_plan(quick_plan, batch_sizes=[1, 4]),
    )
    reason = out["results"]["batch_sweep"]["skipped"]
    assert (
        reason.startswith("input 'image' has a fixed batch dimension of 1") and "\n" not in reason
    )


@pytest.mark.slow
def test_thread_scaling_covers_one_to_the_online_cores(example_models, golden_sets, quick_plan):
    import os

    out = run_measurement(
        example_models["classifier"],
        golden_sets["classifier"],
        scenario_plan(quick_plan, thread_scaling=True),
    )
    scaling = out["results"]["thread_scaling"]
    n = os.sysconf("SC_NPROCESSORS_ONLN")
    assert scaling["online_cores"] == n
    assert [p["threads"] for p in scaling["points"]] == list(range(1, min(n, 8) + 1))[
        : len(scaling["points"])
    ]
    assert all(p["calls_per_s"] > 0 and p["p50_ms"] > 0 for p in scaling["points"])
    rec = scaling["recommended"]
    assert rec["threads"] in [p["threads"] for p in scaling["points"]] and rec["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["classifier", "classifier_tflite"])
def test_server_scenario_reports_tail_latency_and_the_highest_rate_held(
    name, example_models, golden_sets, quick_plan
):
    out = run_measurement(
        example_models[name],
        golden_sets[name],
        scenario_plan(quick_plan, server=True, server_callers=2, server_search_steps=3),
    )
    server = out["results"]["server"]
    assert server["callers"] == 2 and server["capacity_per_s"] > 0
    target = server["at_target"]
    assert target["queries"] >= 64
    assert target["p50_ms"] <= target["p90_ms"] <= target["p99_ms"] <= target["max_ms"]
    # Latency includes queueing: never less than the wait in the queue.
    assert target["p99_ms"] >= target["queue_p99_ms"]
    assert len(server["steps"]) == 3
    lo, hi = server["bracket_per_s"]
    assert 0 <= lo < hi <= 1.2 * server["capacity_per_s"] + 1e-3
    if server["max_rate_held_per_s"] is not None:
        assert server["max_rate_held_per_s"] == lo
    # A step that ran faster than its callers could serve is seen as saturated.
    for step in server["steps"]:
        if step["target_rate_per_s"] > 1.1 * server["capacity_per_s"]:
            assert step["saturated"]


@pytest.mark.slow
def test_operator_profile_names_the_heaviest_operator_by_construction(tmp_path, quick_plan):
    model = build_matmul_heavy(tmp_path / "matmul_heavy.onnx")
    out = run_measurement(model, None, scenario_plan(quick_plan, operator_profile=True, threads=1))
    profile = out["results"]["operators"]["profile"]
    assert profile["operators"][0]["op_type"] == "MatMul"
    assert profile["operators"][0]["share"] > 0.5
    assert profile["operators"][0]["nodes"] == 16
    shares = [o["share"] for o in profile["operators"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0, abs=1e-3)
    assert "cpu_fallback" not in out["results"]["operators"]


@pytest.mark.slow
def test_cpu_fallback_under_a_provider_that_takes_no_node_is_reported(example_models, quick_plan):
    # AzureExecutionProvider ships with the CPU onnxruntime wheel and runs no local node.
    out = run_measurement(
        example_models["classifier"],
        None,
        quick_plan(providers=["AzureExecutionProvider", "CPUExecutionProvider"]),
    )
    ops = out["results"]["operators"]
    fb = ops["cpu_fallback"]
    assert fb["finding"] and fb["accelerators"] == ["AzureExecutionProvider"]
    assert {n["op_type"] for n in fb["cpu_nodes"]} >= {"Conv", "Gemm"}
    assert ops["fallback_finding"].startswith(f"{len(fb['cpu_nodes'])} node(s) ran on the CPU")
    assert out["status"] in ("degraded", "inconclusive")
    if out["status"] == "degraded":
        assert ops["fallback_finding"] in out["reason"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "whole", "left"),
    [("classifier_tflite", True, []), ("classifier_int8", False, ["SOFTMAX"])],
)
def test_litert_reports_what_xnnpack_took_and_left(name, whole, left, example_models, quick_plan):
    out = run_measurement(
        example_models[name], None, scenario_plan(quick_plan, operator_profile=True)
    )
    delegate = out["results"]["operators"]["delegate"]
    assert delegate["asked"] == "XNNPACK" and delegate["delegate_applied"]
    assert delegate["whole_graph"] is whole
    assert [o["op_type"] for o in delegate["left_operators"]] == left
    off = run_measurement(
        example_models[name], None, scenario_plan(quick_plan, operator_profile=True, xnnpack=False)
    )
    assert off["results"]["operators"]["delegate"]["delegate_applied"] is False
