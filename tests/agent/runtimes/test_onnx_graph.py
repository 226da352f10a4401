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

    data = build_example("classifier", tmp_path).read_bytes()
    nodes = graph_nodes(data)
    assert [n["op_type"] for n in nodes[:3]] == ["Conv", "Relu", "GlobalAveragePool"]
    assert nodes[0]["inputs"] == ["image", "conv.weight", "conv.bias"]
    assert nodes[5] == {
        "name": "",
        "op_type": "Split",
        "inputs": ["head", "head.split"],
        "outputs": ["logits", "score_logit"],
    }
    assert graph_output_names(data) == ["probs", "score"]
    assert graph_initializer_names(data) == {
        "conv.weight",
        "conv.bias",
        "head.weight",
        "head.bias",
        "head.split",
    }
    marked = with_graph_outputs(data, ["relu", "/a/name with/slashes"])
    model = onnx.load_from_string(marked)
    assert [o.name for o in model.graph.output] == [
        "probs",
        "score",
        "relu",
        "/a/name with/slashes",
    ]
    assert len(model.graph.node) == len(nodes) and len(model.graph.initializer) == 5
    assert graph_output_names(marked)[2:] == ["relu", "/a/name with/slashes"]
