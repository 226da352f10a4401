"""The operator types of an ONNX model's main graph, read with the protobuf wire walker of
``onnx_external_data.py`` (no ``onnx`` package on the device).

Read in the worker, never in the agent process (which does not parse models itself): the
warm job hands the list to ``measure/quantization.py``, which says whether the model is
quantized to int8 and in which form.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from edgequal.contract.onnx_external_data import (
    MODEL_GRAPH,
    MalformedModel,
    proto_fields,
    proto_text,
)

_GRAPH_NODE = 1
_NODE_OP_TYPE = 4


def node_op_types(data) -> list[str]:
    """The ``op_type`` of every node of the main graph, in order (bytes or a buffer)."""
    op_types: list[str] = []
    for number, wire, graph in proto_fields(data, 0, len(data)):
        if number != MODEL_GRAPH or wire != 2:
            continue
        for gnum, gwire, node in proto_fields(data, *graph):
            if gnum != _GRAPH_NODE or gwire != 2:
                continue
            for nnum, nwire, value in proto_fields(data, *node):
                if nnum == _NODE_OP_TYPE and nwire == 2:
                    op_types.append(proto_text(data, value))
    return op_types


def model_op_types(path: Path) -> list[str] | None:
    """:func:`node_op_types` of the model file at ``path``; None when it cannot be walked."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return node_op_types(buf)
    except (OSError, ValueError, MalformedModel):
        return None
