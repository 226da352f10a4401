"""The protobuf walker's graph reads and its output marking, against the ``onnx`` package's
own reading of the rewritten model."""

from __future__ import annotations

from edgequal.agent.runtimes.onnx_graph import (
    graph_initializer_names,
    graph_nodes,
    graph_output_names,
    with_graph_outputs,
)
from edgequal.host.examples.catalog import build_example


def test_nodes_outputs_and_marked_outputs_read_back(tmp_path):
    import onnx

    data = build_example("mid", tmp_path).read_bytes()
    nodes = graph_nodes(data)
    assert [n["op_type"] for n in nodes[:3]] == ["Conv", "Relu", "Conv"]
    assert nodes[0]["inputs"] == ["image", "conv0.weight", "conv0.bias"]
    assert nodes[0]["outputs"] == ["conv0"] and nodes[-1]["outputs"] == ["probs"]
    assert graph_output_names(data) == ["probs"]
    assert graph_initializer_names(data) == {
        *(f"conv{i}.{p}" for i in range(6) for p in ("weight", "bias")),
        "fc.weight",
        "fc.bias",
    }
    marked = with_graph_outputs(data, ["relu2", "/a/name with/slashes"])
    model = onnx.load_from_string(marked)
    assert [o.name for o in model.graph.output] == ["probs", "relu2", "/a/name with/slashes"]
    assert len(model.graph.node) == len(nodes) and len(model.graph.initializer) == 14
    assert graph_output_names(marked)[1:] == ["relu2", "/a/name with/slashes"]
