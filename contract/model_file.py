"""Whether a file is a model of the kind its runtime takes, from its bytes alone.

No runtime is imported and nothing is parsed beyond the container's framing, so a host
can refuse a text file renamed ``.onnx`` before it uploads anything, and a file of any
size is checked by reading a few bytes:

- TFLite: a FlatBuffer whose file identifier (bytes 4-8) is ``TFL3``.
- ONNX: a protobuf ``ModelProto``: the top-level fields are walked by their tags
  (lengths skipped with a seek), every tag must have a valid wire type, every length
  must fit the file, and the model must carry ``ir_version`` (field 1) and a ``graph``
  (field 7, length-delimited). A text file fails within its first bytes.
"""

from __future__ import annotations

from pathlib import Path

_MAX_FIELDS = 100_000  # a ModelProto has a handful of top-level fields; never loop on junk


def _varint(f) -> int | None:
    """The next base-128 varint of ``f``, or None at a clean end of file."""
    shift = value = 0
    for i in range(10):
        b = f.read(1)
        if not b:
            if i == 0:
                return None
            raise ValueError("the file ends inside a varint")
        value |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return value
        shift += 7
    raise ValueError("a varint longer than 10 bytes")


def onnx_problem(path: Path) -> str | None:
    """Why ``path`` is not an ONNX ModelProto (None: its framing is one, with a graph)."""
    size = Path(path).stat().st_size
    seen: set[int] = set()
    try:
        with open(path, "rb") as f:
            for _ in range(_MAX_FIELDS):
                tag = _varint(f)
                if tag is None:
                    break
                field, wire = tag >> 3, tag & 7
                if field == 0 or wire not in (0, 1, 2, 5):
                    return f"byte {f.tell() - 1} is no protobuf field (wire type {wire})"
                if wire == 0:
                    if _varint(f) is None:
                        return "the file ends inside a field"
                elif wire == 2:
                    length = _varint(f)
                    if length is None or f.tell() + length > size:
                        return f"field {field} claims more bytes than the file holds"
                    f.seek(length, 1)
                else:
                    f.seek(8 if wire == 1 else 4, 1)
                    if f.tell() > size:
                        return "the file ends inside a field"
                if field == 7 and wire != 2 or field == 1 and wire != 0:
                    return f"field {field} has the wrong wire type for an ONNX model"
                seen.add(field)
    except ValueError as e:
        return str(e)
    if size == 0:
        return "the file is empty"
    if 7 not in seen:
        return "it has no graph (ModelProto field 7)"
    if 1 not in seen:
        return "it has no ir_version (ModelProto field 1)"
    return None


def tflite_problem(path: Path) -> str | None:
    """Why ``path`` is not a TFLite FlatBuffer (None: it carries the TFL3 identifier)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) < 8:
        return "the file is shorter than a FlatBuffer header"
    if head[4:8] != b"TFL3":
        return "it lacks the TFL3 file identifier at byte 4"
    return None
