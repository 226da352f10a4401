"""The runtimes' diagnostic hooks on real models: onnxruntime's profiler, LiteRT's node list."""

from __future__ import annotations

from edgequal.agent.runtimes.base import RuntimeOptions
from edgequal.agent.runtimes.litert import LiteRtRuntime
from edgequal.agent.runtimes.onnxruntime import OnnxRuntime
from edgequal.agent.worker.io import synthesize_inputs


def test_onnxruntime_profiles_each_node_per_run(example_models):
    rt = OnnxRuntime(RuntimeOptions(threads=1, graph_optimization="disabled"))
    rt.load(example_models["classifier"])
    assert rt.concurrent_calls and "CPUExecutionProvider" in OnnxRuntime.available_providers()
    events = rt.node_timings(synthesize_inputs(rt.inputs(), {}, 0), runs=3)
    # Unoptimized, every node of the graph runs, each once per inference.
    ops = sorted({e["op_type"] for e in events})
    assert ops == [
        "Conv",
        "Flatten",
        "Gemm",
        "GlobalAveragePool",
        "Relu",
        "Sigmoid",
        "Softmax",
        "Split",
    ]
    assert len(events) == 3 * 8
    assert all(e["provider"] == "CPUExecutionProvider" and e["dur_us"] >= 0 for e in events)


def test_litert_lists_the_delegate_node_after_the_models_own(example_models):
    rt = LiteRtRuntime(RuntimeOptions())
    rt.load(example_models["classifier_int8"])
    assert (
        not rt.concurrent_calls
        and rt.node_timings(synthesize_inputs(rt.inputs(), {}, 0), runs=1) is None
    )
    nodes = rt.graph_nodes()
    assert [n["op_name"] for n in nodes] == ["FULLY_CONNECTED", "SOFTMAX", "DELEGATE"]
    off = LiteRtRuntime(RuntimeOptions(xnnpack=False))
    off.load(example_models["classifier_int8"])
    assert [n["op_name"] for n in off.graph_nodes()] == ["FULLY_CONNECTED", "SOFTMAX"]
