"""Operator time, CPU fallback and delegate coverage from known traces and node lists."""

from __future__ import annotations

from edgequal.agent.measure.operators import (
    cpu_fallback,
    delegate_coverage,
    node_events,
    operator_profile,
)

CPU = "CPUExecutionProvider"


def _node(name, op, dur, ts, provider=CPU):
    return {
        "cat": "Node",
        "name": f"{name}_kernel_time",
        "dur": dur,
        "ts": ts,
        "args": {"op_name": op, "provider": provider},
    }


TRACE = [
    {"cat": "Session", "name": "model_run", "ts": 0, "dur": 500},
    _node("conv0", "Conv", 400, 1),  # the first run: dropped
    {"cat": "Session", "name": "model_run", "ts": 1000, "dur": 100},
    _node("conv0", "Conv", 60, 1001),
    {"cat": "Node", "name": "conv0_fence_before", "ts": 1001, "dur": 0},
    _node("conv1", "Conv", 20, 1062, "CUDAExecutionProvider"),
    _node("relu", "Relu", 20, 1083),
    {"cat": "Session", "name": "model_run", "ts": 2000, "dur": 100},
    _node("conv0", "Conv", 60, 2001),
    _node("conv1", "Conv", 20, 2062, "CUDAExecutionProvider"),
    _node("relu", "Relu", 20, 2083),
]


def test_node_events_keep_kernel_times_after_the_skipped_runs():
    events = node_events(TRACE, skip_runs=1)
    assert [(e["node"], e["dur_us"]) for e in events] == [
        ("conv0", 60.0),
        ("conv1", 20.0),
        ("relu", 20.0),
        ("conv0", 60.0),
        ("conv1", 20.0),
        ("relu", 20.0),
    ]
    assert len(node_events(TRACE)) == 7


def test_operator_profile_sums_by_type_and_node_per_run_with_shares():
    p = operator_profile(node_events(TRACE, skip_runs=1), runs=2)
    assert p["total_us_per_run"] == 100.0
    assert p["operators"] == [
        {"op_type": "Conv", "us_per_run": 80.0, "share": 0.8, "nodes": 2},
        {"op_type": "Relu", "us_per_run": 20.0, "share": 0.2, "nodes": 1},
    ]
    assert p["nodes"][0] == {
        "node": "conv0",
        "op_type": "Conv",
        "provider": CPU,
        "us_per_run": 60.0,
        "share": 0.6,
    }
    assert p["operator_types"] == 2 and p["node_count"] == 3


def test_one_kernel_run_that_waited_for_a_cpu_does_not_own_the_profile():
    # Three runs; the second run's Relu was preempted for 5 ms (the profiler's wall clock).
    trace = [{"cat": "Session", "name": "model_run", "ts": t, "dur": 100} for t in (0, 1000, 2000)]
    for run, relu in enumerate((20, 5000, 20)):
        trace += [
            _node("conv0", "Conv", 60, 1000 * run + 1),
            _node("relu", "Relu", relu, 1000 * run + 62),
        ]
    p = operator_profile(node_events(trace), runs=3)
    assert [(o["op_type"], o["us_per_run"], o["share"]) for o in p["operators"]] == [
        ("Conv", 60.0, 0.75),
        ("Relu", 20.0, 0.25),
    ]
    assert p["total_us_per_run"] == 80.0


def test_cpu_fallback_lists_nodes_left_on_the_cpu_under_an_accelerator():
    events = node_events(TRACE, skip_runs=1)
    fb = cpu_fallback(events, ["CUDAExecutionProvider", CPU])
    assert fb["accelerators"] == ["CUDAExecutionProvider"]
    assert fb["cpu_nodes"] == [
        {"node": "conv0", "op_type": "Conv"},
        {"node": "relu", "op_type": "Relu"},
    ]
    assert fb["nodes_per_provider"] == {CPU: 2, "CUDAExecutionProvider": 1}
    assert fb["finding"] is True
    assert cpu_fallback(events, [CPU]) is None and cpu_fallback(events, None) is None


def _op(index, name, inputs, outputs):
    return {"index": index, "op_name": name, "inputs": inputs, "outputs": outputs}


def test_delegate_coverage_walks_back_from_the_partitions_outputs():
    # The int8 example as LiteRT lists it under XNNPACK: FULLY_CONNECTED taken, SOFTMAX left.
    ops = [
        _op(0, "FULLY_CONNECTED", [0, 1, 2], [3]),
        _op(1, "SOFTMAX", [3], [4]),
        _op(2, "DELEGATE", [0, 1, 2], [3]),
    ]
    cov = delegate_coverage(ops)
    assert cov["delegate_applied"] and cov["partitions"] == 1
    assert cov["delegated_nodes"] == 1 and not cov["whole_graph"]
    assert cov["left_operators"] == [{"op_type": "SOFTMAX", "nodes": 1}]
    whole = delegate_coverage(ops[:1] + [_op(1, "DELEGATE", [0, 1, 2], [3])])
    assert whole["whole_graph"] and whole["left_nodes"] == []
    none = delegate_coverage(ops[:2])
    assert not none["delegate_applied"] and none["delegated_nodes"] == 0
    assert [o["op_type"] for o in none["left_nodes"]] == ["FULLY_CONNECTED", "SOFTMAX"]
