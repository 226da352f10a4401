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


_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME = 1, 2, 3
_GRAPH_OUTPUT = 12
_VALUE_INFO_NAME = 1


def graph_nodes(data) -> list[dict]:
    """The main graph's nodes in file order (ONNX requires it topological):
    ``{name, op_type, inputs, outputs}`` each (empty input names are optional inputs left out)."""
    nodes: list[dict] = []
    for number, wire, graph in proto_fields(data, 0, len(data)):
        if number != MODEL_GRAPH or wire != 2:
            continue
        for gnum, gwire, node in proto_fields(data, *graph):
            if gnum != _GRAPH_NODE or gwire != 2:
                continue
            entry: dict = {"name": "", "op_type": "", "inputs": [], "outputs": []}
            for nnum, nwire, value in proto_fields(data, *node):
                if nwire != 2:
                    continue
                if nnum == _NODE_OP_TYPE:
                    entry["op_type"] = proto_text(data, value)
                elif nnum == _NODE_NAME:
                    entry["name"] = proto_text(data, value)
                elif nnum == _NODE_INPUT:
                    entry["inputs"].append(proto_text(data, value))
                elif nnum == _NODE_OUTPUT:
                    entry["outputs"].append(proto_text(data, value))
            nodes.append(entry)
    return nodes


_GRAPH_INITIALIZER, _TENSOR_NAME = 5, 8


def graph_initializer_names(data) -> set[str]:
    """The names of the main graph's initializers (weights: not intermediate values)."""
    names: set[str] = set()
    for number, wire, graph in proto_fields(data, 0, len(data)):
        if number != MODEL_GRAPH or wire != 2:
            continue
        for gnum, gwire, value in proto_fields(data, *graph):
            if gnum != _GRAPH_INITIALIZER or gwire != 2:
                continue
            for tnum, twire, name in proto_fields(data, *value):
                if tnum == _TENSOR_NAME and twire == 2:
                    names.add(proto_text(data, name))
    return names


def graph_output_names(data) -> list[str]:
    """The names of the main graph's outputs, in order."""
    names: list[str] = []
    for number, wire, graph in proto_fields(data, 0, len(data)):
        if number != MODEL_GRAPH or wire != 2:
            continue
        for gnum, gwire, value in proto_fields(data, *graph):
            if gnum != _GRAPH_OUTPUT or gwire != 2:
                continue
            for vnum, vwire, name in proto_fields(data, *value):
                if vnum == _VALUE_INFO_NAME and vwire == 2:
                    names.append(proto_text(data, name))
    return names


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload


def with_graph_outputs(data, names) -> bytes:
    """The model's bytes with ``names`` added to its main graph's outputs (by name alone:
    onnxruntime takes a graph output's type from the node that makes it), as Polygraphy's
    ``--onnx-outputs mark all`` does, without the ``onnx`` package."""
    data = bytes(data)
    graph = None
    for number, wire, value in proto_fields(data, 0, len(data)):
        if number == MODEL_GRAPH and wire == 2:
            graph = value
    if graph is None:
        raise MalformedModel("the model has no graph")
    start, end = graph
    prefix = _varint_bytes(MODEL_GRAPH << 3 | 2) + _varint_bytes(end - start)
    if data[start - len(prefix) : start] != prefix:
        raise MalformedModel("the graph's field header is not in its shortest form")
    extra = b"".join(
        _length_delimited(_GRAPH_OUTPUT, _length_delimited(_VALUE_INFO_NAME, n.encode()))
        for n in names
    )
    body = data[start:end] + extra
    return data[: start - len(prefix)] + _length_delimited(MODEL_GRAPH, body) + data[end:]
