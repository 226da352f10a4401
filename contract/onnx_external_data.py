"""ONNX external data: find every tensor stored outside the model file, and refuse unsafe ones.

An ONNX model may keep tensor bytes in other files (``data_location: EXTERNAL``
with ``external_data`` entries ``location``, ``offset``, ``length``), resolved
against the model's directory. onnxruntime opens whatever a location names, so
a hostile model could read any file the agent's user can (``../device_key.pem``,
``/etc/shadow``, a symlink, or onnxruntime's in-memory ``*/_ORT_MEM_ADDR_/*``).

:func:`check_external_data` refuses, before onnxruntime reads anything, a
location that is absolute or has ``..`` (or any name the bundle rule of
``agent/service/store.py`` refuses), a path through a symlink, a file that is not in the
model's directory (the agent puts there exactly the files the host pushed), and
an offset or length beyond the file. Only ``stat`` is called on the data files.

The model is read with a small protobuf wire-format walker (no ``onnx`` package
on the device) that follows every place a tensor can live: graph initializers
and sparse initializers, node attributes (tensors, sparse tensors, subgraphs),
functions and training graphs. The agent never parses a model itself: it runs
this module as a child process (``python -m edgequal.contract.onnx_external_data
MODEL``), which prints one JSON line and leaves the model out of the page cache
(so the cold-load phase still loads it from storage).
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from edgequal.contract.errors import BadInput, ModelRejected

# ONNX field numbers (onnx/onnx.proto), only those that lead to a TensorProto.
MODEL_GRAPH, _MODEL_TRAINING, _MODEL_FUNCTIONS = 7, 20, 25
_TRAINING_GRAPHS = (1, 2)  # initialization, algorithm
_GRAPH_NODE, _GRAPH_INIT, _GRAPH_SPARSE_INIT = 1, 5, 15
_NODE_ATTRIBUTE = 5
_FUNCTION_NODE = 7
_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS, _ATTR_SPARSE, _ATTR_SPARSES = 5, 6, 10, 11, 22, 23
_SPARSE_VALUES, _SPARSE_INDICES = 1, 2
_TENSOR_DIMS, _TENSOR_TYPE, _TENSOR_NAME, _TENSOR_EXTERNAL, _TENSOR_LOCATION = 1, 2, 8, 13, 14
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL

# TensorProto.DataType -> bytes per element, for the fixed-size types.
_ITEM_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
               14: 8, 15: 16, 16: 2, 17: 1, 18: 1, 19: 1, 20: 1}  # fmt: skip

_MAX_DEPTH = 64
"""Subgraphs nest; a file nesting deeper than this is refused rather than walked."""


@dataclass(frozen=True)
class ExternalRef:
    """One tensor whose bytes live in another file: where, from which offset, how many bytes."""

    tensor: str
    location: str
    offset: int
    length: int | None
    nbytes: int | None  # dims x element size, when the type has a fixed size


class MalformedModel(ValueError):
    pass


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise MalformedModel("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def proto_fields(buf, start: int, end: int):
    """Yield ``(field number, wire type, value)``; value is an int or a ``(start, end)`` span."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise MalformedModel("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = None, pos + 8
        elif wire == 5:
            value, pos = None, pos + 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = (pos, pos + size), pos + size
        elif wire == 3:  # a group: skip to its matching end
            pos = _skip_group(buf, pos, end, number)
            value = None
        else:
            raise MalformedModel(f"wire type {wire}")
        if pos > end:
            raise MalformedModel("a field runs past its message")
        yield number, wire, value


def _skip_group(buf, pos: int, end: int, number: int) -> int:
    depth = 1
    while pos < end:
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            pos += size
        elif wire == 3:
            depth += 1
        elif wire == 4:
            depth -= 1
            if depth == 0:
                return pos
        else:
            raise MalformedModel(f"wire type {wire}")
    raise MalformedModel(f"group {number} is not closed")


def proto_text(buf, span) -> str:
    return bytes(buf[span[0] : span[1]]).decode("utf-8", "replace")


class _Walker:
    def __init__(self, buf):
        self.buf = buf
        self.refs: list[ExternalRef] = []

    def _messages(self, start, end, wanted):
        for number, wire, value in proto_fields(self.buf, start, end):
            if number in wanted and wire == 2:
                yield number, value

    def model(self) -> None:
        for number, (s, e) in self._messages(
            0, len(self.buf), (MODEL_GRAPH, _MODEL_TRAINING, _MODEL_FUNCTIONS)
        ):
            if number == MODEL_GRAPH:
                self.graph(s, e, 1)
            elif number == _MODEL_TRAINING:
                for _, (gs, ge) in self._messages(s, e, _TRAINING_GRAPHS):
                    self.graph(gs, ge, 2)
            else:
                for _, (ns, ne) in self._messages(s, e, (_FUNCTION_NODE,)):
                    self.node(ns, ne, 2)

    def graph(self, start, end, depth) -> None:
        if depth > _MAX_DEPTH:
            raise MalformedModel(f"graphs nested deeper than {_MAX_DEPTH}")
        wanted = (_GRAPH_NODE, _GRAPH_INIT, _GRAPH_SPARSE_INIT)
        for number, (s, e) in self._messages(start, end, wanted):
            if number == _GRAPH_NODE:
                self.node(s, e, depth)
            elif number == _GRAPH_INIT:
                self.tensor(s, e)
            else:
                self.sparse(s, e)

    def node(self, start, end, depth) -> None:
        for _, (s, e) in self._messages(start, end, (_NODE_ATTRIBUTE,)):
            wanted = (_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS, _ATTR_SPARSE, _ATTR_SPARSES)
            for number, (vs, ve) in self._messages(s, e, wanted):
                if number in (_ATTR_T, _ATTR_TENSORS):
                    self.tensor(vs, ve)
                elif number in (_ATTR_G, _ATTR_GRAPHS):
                    self.graph(vs, ve, depth + 1)
                else:
                    self.sparse(vs, ve)

    def sparse(self, start, end) -> None:
        for _, (s, e) in self._messages(start, end, (_SPARSE_VALUES, _SPARSE_INDICES)):
            self.tensor(s, e)

    def tensor(self, start, end) -> None:
        name, location_kind, entries, dims, dtype = "", 0, {}, [], None
        for number, wire, value in proto_fields(self.buf, start, end):
            if number == _TENSOR_NAME and wire == 2:
                name = proto_text(self.buf, value)
            elif number == _TENSOR_LOCATION and wire == 0:
                location_kind = value
            elif number == _TENSOR_TYPE and wire == 0:
                dtype = value
            elif number == _TENSOR_DIMS and wire == 0:
                dims.append(value)
            elif number == _TENSOR_DIMS and wire == 2:  # packed
                pos, stop = value
                while pos < stop:
                    d, pos = _varint(self.buf, pos)
                    dims.append(d)
            elif number == _TENSOR_EXTERNAL and wire == 2:
                key = val = ""
                for n, w, v in proto_fields(self.buf, *value):
                    if w == 2 and n == 1:
                        key = proto_text(self.buf, v)
                    elif w == 2 and n == 2:
                        val = proto_text(self.buf, v)
                entries[key] = val
        if location_kind != _EXTERNAL and "location" not in entries:
            return
        name = name or "(unnamed)"
        if "location" not in entries:
            raise ModelRejected(f"tensor {name[:80]!r} is stored externally but names no location")
        offset = _number(entries.get("offset", "0"), name, "offset")
        length = _number(entries["length"], name, "length") if "length" in entries else None
        nbytes = None
        if dtype in _ITEM_BYTES and all(d < 2**63 for d in dims):
            count = 1
            for d in dims:
                count *= d
            nbytes = count * _ITEM_BYTES[dtype]
        self.refs.append(ExternalRef(name, entries["location"], offset, length, nbytes))


def _number(text: str, tensor: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise ModelRejected(f"external data of tensor {tensor[:80]!r} has {what} {text[:40]!r}")
    return int(text)


def external_data_refs(data) -> list[ExternalRef]:
    """Every external-data reference in a serialized ModelProto.

    Raises ModelRejected for a reference without a location or with a non-numeric
    offset or length, and ValueError when the bytes are not a protobuf message.
    """
    view = memoryview(data)
    walker = _Walker(view)
    try:
        walker.model()
        return walker.refs
    finally:
        walker.buf = None
        view.release()  # a mapped file can be closed only when no view of it is left


def check_external_data(model_path: Path) -> list[ExternalRef]:
    """The model's external-data references, each checked; ModelRejected names the first bad one.

    Reads the model file only (mapped); the data files are only ``lstat``-ed.
    """
    from edgequal.contract.artifacts import check_bundle_name

    model_path = Path(model_path)
    with open(model_path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[4:8] == b"TFL3" or data.find(b"location") < 0:
                # A TFLite flatbuffer has no external data; nor can an ONNX model
                # without the "location" key every external_data entry needs.
                return []
            error = None
            try:
                refs = external_data_refs(data)
            except ModelRejected as e:
                error = ModelRejected(str(e), hint=e.hint)
            except (ValueError, IndexError) as e:
                error = ModelRejected(
                    f"the agent rejected the model: its structure cannot be read ({e}), so its "
                    "external data cannot be checked"
                )
        if error is not None:
            raise error
    base = model_path.parent
    base_real = os.path.realpath(base)
    for ref in refs:
        where = f"external data of tensor {ref.tensor[:80]!r}"
        try:
            check_bundle_name(ref.location)
        except BadInput as e:
            raise ModelRejected(
                f"{where} is at {ref.location[:120]!r}, outside the model's directory: {e}"
            ) from None
        path = base
        for part in ref.location.split("/"):
            path = path / part
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                raise ModelRejected(
                    f"{where} names {ref.location!r}, which is not in the model's bundle",
                    hint="push the model with every external-data file it names",
                ) from None
            if stat.S_ISLNK(st.st_mode):
                raise ModelRejected(f"{where} is at {ref.location!r}, through a symlink")
        if not stat.S_ISREG(st.st_mode) or not os.path.realpath(path).startswith(
            base_real + os.sep
        ):
            raise ModelRejected(f"{where} names {ref.location!r}, which is not a regular file")
        wanted = ref.length if ref.length is not None else ref.nbytes
        if ref.offset > st.st_size or (wanted is not None and ref.offset + wanted > st.st_size):
            span = (
                f"{wanted} bytes at offset {ref.offset}"
                if wanted is not None
                else (f"offset {ref.offset}")
            )
            raise ModelRejected(
                f"{where} asks for {span} of {ref.location!r}, which holds {st.st_size} bytes"
            )
        if ref.length is not None and ref.nbytes is not None and ref.length != ref.nbytes:
            raise ModelRejected(
                f"{where} gives length {ref.length}, but the tensor holds {ref.nbytes} bytes"
            )
    return refs


def main(argv: list[str] | None = None) -> int:
    """``python -m edgequal.contract.onnx_external_data MODEL``: one JSON line, exit 0 or 2."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(json.dumps({"ok": False, "error": "usage: onnx_external_data MODEL"}))
        return 2
    try:
        refs = check_external_data(Path(args[0]))
    except ModelRejected as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return 2
    except OSError as e:
        print(json.dumps({"ok": False, "error": f"cannot read the model: {e.strerror or e}"}))
        return 2
    finally:
        _drop_from_page_cache(Path(args[0]))
    print(json.dumps({"ok": True, "refs": [asdict(r) for r in refs]}))
    return 0


def _drop_from_page_cache(path: Path) -> None:
    """Leave the model out of the page cache, as its upload did, so cold loads stay cold."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
