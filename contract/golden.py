"""The golden set file: named cases of raw inputs, reference outputs, and a manifest.

One ``.npz`` file (a zip of ``.npy`` arrays, read with ``allow_pickle=False``):

- ``__manifest__``: a uint8 array holding the manifest as UTF-8 JSON;
- ``inputs/CASE/NAME`` and ``outputs/CASE/NAME``: the arrays of each case;
- for a golden set of raw files (``golden make --raw``): ``raw/CASE/NAME``, each input's
  raw file (PNG, JPEG, WAV, UTF-8 text) as uint8 bytes, optionally
  ``reference_inputs/CASE/NAME``, the tensors the training pipeline fed the model, and
  ``assets/SHA256``, files the pipeline names (a tokenizer.json) by their digest. The
  manifest's ``pipeline`` (``contract/pipeline_spec.py``) declares the stages; ``inputs/``
  then holds what that pipeline made of the raw files on the host.
- optionally ``intermediates/CASE/TENSOR`` (``golden make --intermediates``): every
  intermediate tensor the reference run computed, by its name in the model, so a model
  changed since (a new export, a weight changed) is localised against them node by node
  (docs/divergence.md).

The manifest (``format: edgequal.golden/v1``) records the model's input and output
specs, the preprocessing contract for raw inputs, the reference runtime and its
version, per-output tolerances, an optional decision rule and optional edge shapes
(``edge_shapes``: ``[{"label", "shapes": {input: [dims]}}]``, the edges of the input
range every qualification with this set repeats) and optional labels (``labels``,
``contract/labels.py``: the true class of each case, the reference's own score). The
file is content-addressed by the sha256 of its bytes. The agent only reads golden sets; the host writes them
(``edgequal golden make``).
"""

from __future__ import annotations

import ast
import json
import math
import os
import struct
import threading
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .artifacts import file_sha256
from .errors import BadInput, GoldenMismatch
from .tensors import TensorSpec, check_feeds, shape_fits, shape_key

FORMAT = "edgequal.golden/v1"
MANIFEST_KEY = "__manifest__"
"""The array holding the manifest (UTF-8 JSON as uint8)."""


@dataclass
class GoldenCase:
    """One named case: the inputs fed to the model and the reference outputs."""

    name: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)
    reference_inputs: dict[str, np.ndarray] = field(default_factory=dict)
    intermediates: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class GoldenSet:
    """A manifest plus its cases, in file order."""

    manifest: dict
    cases: list[GoldenCase]
    assets: dict[str, bytes] = field(default_factory=dict)

    @property
    def inputs(self) -> list[TensorSpec]:
        """The model inputs the golden set was made for."""
        return [TensorSpec.from_dict(d) for d in self.manifest.get("inputs", [])]

    @property
    def outputs(self) -> list[TensorSpec]:
        """The model outputs the reference values belong to."""
        return [TensorSpec.from_dict(d) for d in self.manifest.get("outputs", [])]

    @property
    def decision(self) -> str | None:
        """The decision rule text (``argmax``, ``topk:K``, ``threshold:OUT>V``) or None."""
        return self.manifest.get("decision")

    @property
    def tolerances(self) -> dict:
        """Per-output tolerance overrides: ``{output: {"atol":..,"rtol":..} | {"class": "fp16"}}``."""
        return self.manifest.get("tolerances", {})

    @property
    def labels(self):
        """The cases' labels (:class:`~.labels.Labels`), None for an unlabelled set."""
        from .labels import Labels

        return Labels.from_json(self.manifest.get("labels"), "manifest field 'labels'")

    @property
    def preprocessing(self):
        """The input contract (:class:`~.input_contract.Preprocessing`), None when not recorded."""
        from .input_contract import Preprocessing

        return Preprocessing.from_json(self.manifest.get("preprocessing"))

    @property
    def pipeline(self):
        """The declared pipeline (:class:`~.pipeline.spec.Pipeline`), None for prepared tensors."""
        from .pipeline_spec import Pipeline

        return Pipeline.from_json(self.manifest.get("pipeline"))

    def check_against(self, model_inputs: list[TensorSpec]) -> None:
        """Raise GoldenMismatch naming the first input that does not fit the model."""
        for case in self.cases:
            check_feeds(model_inputs, case.inputs, where=f"golden case '{case.name}' input")

    def shape_groups(self) -> dict[str, list[GoldenCase]]:
        """Cases grouped by their input shapes, e.g. ``image=1x3x32x32``: latency is per shape."""
        groups: dict[str, list[GoldenCase]] = {}
        for case in self.cases:
            groups.setdefault(shape_key(case.inputs), []).append(case)
        return groups


def write_golden(
    path: Path,
    manifest: Mapping,
    cases: list[GoldenCase],
    assets: Mapping[str, bytes] | None = None,
) -> str:
    """Write a golden set atomically; returns its sha256. ``assets`` are files by sha256."""
    manifest = dict(manifest)
    manifest["format"] = FORMAT
    manifest["cases"] = [c.name for c in cases]
    for c in cases:
        if "/" in c.name or not c.name:
            raise BadInput(f"golden case name '{c.name}' must be non-empty and contain no '/'")
    arrays = {
        MANIFEST_KEY: np.frombuffer(json.dumps(manifest, sort_keys=True).encode(), dtype=np.uint8)
    }
    for c in cases:
        for name, a in c.inputs.items():
            arrays[f"inputs/{c.name}/{name}"] = np.asarray(a)
        for name, a in c.outputs.items():
            arrays[f"outputs/{c.name}/{name}"] = np.asarray(a)
        for name, data in c.raw.items():
            arrays[f"raw/{c.name}/{name}"] = np.frombuffer(data, dtype=np.uint8)
        for name, a in c.reference_inputs.items():
            arrays[f"reference_inputs/{c.name}/{name}"] = np.asarray(a)
        for name, a in c.intermediates.items():
            arrays[f"intermediates/{c.name}/{name}"] = np.asarray(a)
    for digest, data in (assets or {}).items():
        arrays[f"assets/{digest}"] = np.frombuffer(data, dtype=np.uint8)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    tmp.replace(path)
    return file_sha256(path)


def read_golden(path: Path) -> GoldenSet:
    """Read a golden set without pickle. Raises BadInput with the reason for any unusable file."""
    path = Path(path)
    hint = "make one with: edgequal golden make MODEL --inputs NPZ -o G.npz"
    arrays = _read_npz(
        path, what="golden set", not_ours=f"{path} is not a golden set file", hint=hint
    )
    if MANIFEST_KEY not in arrays:
        raise BadInput(
            f"{path} has no manifest: not an edgequal golden set", hint="edgequal golden make"
        )
    try:
        manifest = json.loads(arrays.pop(MANIFEST_KEY).tobytes().decode())
    except (ValueError, RecursionError) as e:
        raise BadInput(f"{path}: the manifest is not valid JSON ({type(e).__name__})") from e
    if not isinstance(manifest, dict):
        raise BadInput(f"{path}: the manifest is not a JSON object")
    if manifest.get("format") != FORMAT:
        shown = manifest.get("format")
        shown = repr(shown[:80]) if isinstance(shown, str) else type(shown).__name__
        raise BadInput(f"{path}: unknown golden format {shown}, expected {FORMAT}")
    _check_manifest(path, manifest)
    cases: dict[str, GoldenCase] = {
        name: GoldenCase(name, {}, {}) for name in manifest.get("cases", [])
    }
    assets: dict[str, bytes] = {}
    for key, a in arrays.items():
        kind, _, rest = key.partition("/")
        if kind == "assets" and rest and "/" not in rest:
            assets[rest] = _raw_bytes(path, key, a)
            continue
        case_name, _, tensor = rest.partition("/")
        if (
            kind not in ("inputs", "outputs", "raw", "reference_inputs", "intermediates")
            or not tensor
        ):
            raise BadInput(f"{path}: unexpected array {key[:120]!r}")
        case = cases.setdefault(case_name, GoldenCase(case_name, {}, {}))
        getattr(case, kind)[tensor] = _raw_bytes(path, key, a) if kind == "raw" else a
    if not cases:
        raise BadInput(f"{path}: the golden set has no cases")
    return GoldenSet(manifest, list(cases.values()), assets)


def _raw_bytes(path: Path, key: str, a: np.ndarray) -> bytes:
    """A raw file's bytes from its one-dimensional uint8 array; BadInput for anything else."""
    if a.dtype != np.uint8 or a.ndim != 1:
        raise BadInput(f"{path}: {key[:120]!r} must be a 1-D uint8 array (a file's bytes)")
    return a.tobytes()


def _check_manifest(path: Path, manifest: dict) -> None:
    """BadInput naming the first manifest field whose type the readers of a GoldenSet cannot use."""

    def bad(field_name: str, what: str) -> BadInput:
        return BadInput(f"{path}: manifest field '{field_name}' must be {what}")

    cases = manifest.get("cases", [])
    if not isinstance(cases, list) or not all(isinstance(c, str) for c in cases):
        raise bad("cases", "a list of case names")
    for key in ("inputs", "outputs"):
        specs = manifest.get(key, [])
        if not isinstance(specs, list):
            raise bad(key, "a list of tensor specs")
        for spec in specs:
            if not (
                isinstance(spec, dict)
                and isinstance(spec.get("name"), str)
                and isinstance(spec.get("dtype"), str)
                and isinstance(spec.get("shape"), list)
                and all(d is None or isinstance(d, (int, str)) for d in spec["shape"])
                and isinstance(spec.get("quantization"), (dict, type(None)))
            ):
                raise bad(key, "a list of {name, dtype, shape} objects")
    if not isinstance(manifest.get("tolerances", {}), dict):
        raise bad("tolerances", "an object")
    if not isinstance(manifest.get("preprocessing"), (dict, type(None))):
        raise bad("preprocessing", "an object or null")
    if not isinstance(manifest.get("pipeline"), (dict, type(None))):
        raise bad("pipeline", "an object or null")
    if not isinstance(manifest.get("decision"), (str, type(None))):
        raise bad("decision", "a string or null")
    manifest_edge_shapes(path, manifest)
    if manifest.get("labels") is not None:
        from .labels import Labels

        try:
            Labels.from_json(manifest["labels"], "manifest field 'labels'")
        except BadInput as e:
            raise BadInput(f"{path}: {e}") from None


def check_edge_shapes(value, field: str) -> list[dict]:
    """Edge shapes checked by the plan's own rule (``plan.edge_shapes``); BadInput names
    ``field`` (``manifest field``, ``--edge-shape``) where the plan's message says ``plan field``."""
    from .declarations import parse_edge_shapes

    try:
        return parse_edge_shapes(value) or []
    except BadInput as e:
        raise BadInput(str(e).replace("plan field", field, 1), hint=e.hint) from None


def edge_shape_misfit(shapes: Mapping, specs: list[TensorSpec]) -> dict | None:
    """The first input an edge shape names that the model lacks, or whose declared fixed
    dims (rank, channels) its sizes contradict: ``{"input", "message"}``; None when every
    input fits (a dynamic dim takes any size, 0 included)."""
    by_name = {s.name: s for s in specs}
    for name, dims in shapes.items():
        spec = by_name.get(name)
        if spec is None:
            inputs = ", ".join(by_name) or "none"
            return {"input": name, "message": f"the model has no input '{name}' (inputs: {inputs})"}
        if not shape_fits(spec, tuple(dims)):
            sizes = "x".join(str(d) for d in dims)
            return {
                "input": name,
                "message": f"input '{name}' is declared {spec.describe()}; {sizes} does not fit it",
            }
    return None


def manifest_edge_shapes(path: Path, manifest: Mapping) -> list[dict]:
    """The edge shapes a golden manifest records (``[]`` when none); BadInput naming the field."""
    value = manifest.get("edge_shapes")
    if value is None:
        return []
    try:
        return check_edge_shapes(value, "manifest field")
    except BadInput as e:
        raise BadInput(f"{path}: {e}", hint=e.hint) from None


# The manifest is a few kilobytes of JSON; a member claiming more is not one.
MAX_MANIFEST_BYTES = 16 << 20


NPZ_LOCK = threading.Lock()
"""Held while a ``.npy`` header is parsed (``ast.literal_eval``, numpy's and ours). On
CPython 3.11 (3.11.7 here) two threads building ASTs at once can fail with
``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905): two
fleet runs' threads, each checking a golden set before a board's run, met it once in a
full suite. Every golden read in this package holds it; the reads are short."""


def read_manifest(path: Path) -> dict:
    """The manifest alone, read with zipfile and json: no array is loaded.

    The agent's own process calls this (for the edge shapes every qualification with
    the set repeats) before any worker runs; the golden set is hostile input, so only
    the manifest member is read, bounded, and its ``.npy`` header is parsed as a
    literal (never unpickled). BadInput for anything that is not a golden set.
    """
    path = Path(path)
    member = MANIFEST_KEY + ".npy"
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(member)
            if info.file_size > MAX_MANIFEST_BYTES:
                raise BadInput(f"{path}: its manifest claims {info.file_size} bytes")
            data = zf.read(info)
        manifest = json.loads(_npy_uint8_bytes(data).decode("utf-8"))
    except KeyError:
        raise BadInput(
            f"{path} has no manifest: not an edgequal golden set", hint="edgequal golden make"
        ) from None
    except FileNotFoundError:
        raise BadInput(f"golden set not found: {path}") from None
    except BadInput:
        raise
    except (
        ValueError,  # json, utf-8, the header
        OSError,
        EOFError,
        zipfile.BadZipFile,
        NotImplementedError,
        RuntimeError,
        zlib.error,
        RecursionError,
        MemoryError,
    ) as e:
        raise BadInput(
            f"{path} is not a golden set file ({type(e).__name__}: {str(e)[:200]})"
        ) from None
    if not isinstance(manifest, dict):
        raise BadInput(f"{path}: the manifest is not a JSON object")
    if manifest.get("format") != FORMAT:
        shown = manifest.get("format")
        shown = repr(shown[:80]) if isinstance(shown, str) else type(shown).__name__
        raise BadInput(f"{path}: unknown golden format {shown}, expected {FORMAT}")
    return manifest


def _npy_uint8_bytes(data: bytes) -> bytes:
    """The bytes of a one-dimensional uint8 ``.npy`` array (format versions 1 to 3)."""
    if data[:6] != b"\x93NUMPY" or len(data) < 10:
        raise ValueError("the manifest member is not a .npy array")
    if data[6] == 1:
        size, start = int.from_bytes(data[8:10], "little"), 10
    elif data[6] in (2, 3):
        size, start = int.from_bytes(data[8:12], "little"), 12
    else:
        raise ValueError(f"the manifest is .npy version {data[6]}")
    try:
        with NPZ_LOCK:
            header = ast.literal_eval(data[start : start + size].decode("latin1"))
    except SyntaxError as e:
        raise ValueError("the manifest's .npy header is not a literal") from e
    if (
        not isinstance(header, dict)
        or header.get("descr") not in ("|u1", "<u1", ">u1")
        or header.get("fortran_order") is not False
        or not isinstance(header.get("shape"), tuple)
        or len(header["shape"]) != 1
        or not isinstance(header["shape"][0], int)
    ):
        raise ValueError("the manifest is not a one-dimensional uint8 array")
    body = data[start + size :]
    if len(body) < header["shape"][0]:
        raise ValueError("the manifest array is shorter than its header says")
    return body[: header["shape"][0]]


def golden_edge_shapes(path: Path) -> list[dict]:
    """The edge shapes recorded in a golden set's manifest (``[]`` when none), validated."""
    return manifest_edge_shapes(path, read_manifest(path))


def _read_npz(path: Path, *, what: str, not_ours: str, hint: str | None = None) -> dict:
    """Every array of an ``.npz`` file, without pickle; BadInput for anything else.

    Before any array is read, its ``.npy`` header is checked against the bytes the
    archive holds for it, so a header declaring terabytes is refused instead of
    allocated. Everything a hostile file can make zipfile or numpy raise is BadInput.
    """
    try:
        archive_bytes = path.stat().st_size
        with zipfile.ZipFile(path) as zf:
            declared = sum(_check_member(zf, info, archive_bytes) for info in zf.infolist())
        memory = _physical_memory_bytes()
        if memory is not None and declared > memory:
            raise BadInput(f"its arrays hold {declared} bytes, more than this machine's memory")
        with NPZ_LOCK, np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise BadInput(f"{what} not found: {path}") from None
    except BadInput as e:
        raise BadInput(f"{not_ours}: {e}", hint=hint) from None
    except (
        ValueError,
        OSError,
        EOFError,
        zipfile.BadZipFile,
        NotImplementedError,  # zipfile: an unsupported compression method
        RuntimeError,  # zipfile: an encrypted member
        zlib.error,
        struct.error,
        MemoryError,
        AttributeError,  # np.load of a bare .npy is an array, not an archive
        TypeError,
    ) as e:
        raise BadInput(f"{not_ours} ({type(e).__name__}: {str(e)[:200]})", hint=hint) from e


_MAX_DEFLATE_RATIO = 1100
"""More than deflate can compress (about 1032:1): a member claiming more is lying."""


def _physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, archive_bytes: int) -> int:
    """The bytes a member's array declares; BadInput when its sizes or ``.npy`` header promise
    more bytes than the file holds."""
    if (
        info.compress_size > archive_bytes
        or info.file_size > max(info.compress_size, 1) * _MAX_DEFLATE_RATIO + 4096
    ):
        raise BadInput(f"member {info.filename[:120]!r} claims {info.file_size} bytes")
    if not info.filename.endswith(".npy"):
        return 0
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise BadInput(f"member {info.filename[:120]!r} is .npy version {version}")
        header_bytes = f.tell()
    if dtype.hasobject:
        raise BadInput(f"member {info.filename[:120]!r} holds Python objects (pickle)")
    declared = math.prod(shape) * dtype.itemsize
    if declared > info.file_size - header_bytes:
        raise BadInput(
            f"array {info.filename[:120]!r} declares {declared} bytes but holds "
            f"{info.file_size - header_bytes}"
        )
    return declared


def split_case_arrays(
    arrays: Mapping[str, np.ndarray], default_case: str = "case0", names: Iterable[str] = ()
) -> dict[str, dict]:
    """Group ``CASE/NAME`` arrays by case; plain ``NAME`` arrays form one case named ``default_case``.

    A case name holds no ``/`` (:func:`write_golden` refuses one), so the key splits at its
    first ``/``: a tensor name may hold any number (PP-OCR's ``save_infer_model/scale_0.tmp_1``).
    A key that is one of ``names`` (the model's tensor names, where known) is a plain ``NAME``.
    """
    known = set(names)
    cases: dict[str, dict] = {}
    for key, a in arrays.items():
        case, sep, name = key.partition("/")
        if not sep or key in known:
            case, name = default_case, key
        cases.setdefault(case, {})[name] = a
    return cases


def load_npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an ``.npz`` file, without pickle; BadInput for anything else."""
    path = Path(path)
    return _read_npz(path, what="file", not_ours=f"{path} is not a readable .npz file")


__all__ = [
    "FORMAT",
    "check_edge_shapes",
    "edge_shape_misfit",
    "golden_edge_shapes",
    "manifest_edge_shapes",
    "read_manifest",
    "GoldenCase",
    "GoldenMismatch",
    "GoldenSet",
    "load_npz_arrays",
    "read_golden",
    "split_case_arrays",
    "write_golden",
]
