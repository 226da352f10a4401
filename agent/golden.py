"""The golden set file: named cases of raw inputs, reference outputs, and a manifest.

One ``.npz`` file (a zip of ``.npy`` arrays, read with ``allow_pickle=False``):

- ``__manifest__``: a uint8 array holding the manifest as UTF-8 JSON;
- ``inputs/CASE/NAME`` and ``outputs/CASE/NAME``: the arrays of each case.

The manifest (``format: edgequal.golden/v1``) records the model's input and output
specs, the preprocessing contract for raw inputs, the reference runtime and its
version, per-output tolerances and an optional decision rule. The file is
content-addressed by the sha256 of its bytes. The agent only reads golden sets;
the host writes them (``edgequal golden make``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import BadInput, GoldenMismatch
from .runtimes.base import TensorSpec, check_feeds, shape_key

FORMAT = "edgequal.golden/v1"
MANIFEST_KEY = "__manifest__"
"""The array holding the manifest (UTF-8 JSON as uint8)."""


def check_npz_sizes(path: Path) -> None:
    """Refuse an ``.npz`` whose arrays declare more bytes than it holds, before numpy allocates.

    numpy allocates what an array's header declares before it reads the data,
    so a few hundred bytes declaring terabytes end in MemoryError. Each member's
    header is read here: an array larger than its member's (uncompressed) size,
    or all of them together larger than this machine's memory, is BadInput.
    """
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = None
    total = 0
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            declared = math.prod(shape) * dtype.itemsize
            if declared > member.file_size:
                raise BadInput(
                    f"{path}: array {member.filename.removesuffix('.npy')} declares shape "
                    f"{tuple(shape)} ({declared} bytes) but holds {member.file_size} bytes",
                    hint="the file is damaged or was not written by numpy",
                )
            total += declared
    if memory is not None and total > memory:
        raise BadInput(
            f"{path}: its arrays hold {total} bytes, more than this machine's memory ({memory})"
        )


@dataclass
class GoldenCase:
    """One named case: the inputs fed to the model and the reference outputs."""

    name: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class GoldenSet:
    """A manifest plus its cases, in file order."""

    manifest: dict
    cases: list[GoldenCase]

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


def write_golden(path: Path, manifest: Mapping, cases: list[GoldenCase]) -> str:
    """Write a golden set atomically; returns its sha256."""
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
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    tmp.replace(path)
    return file_sha256(path)


def read_golden(path: Path) -> GoldenSet:
    """Read a golden set without pickle. Raises BadInput with the reason for any unusable file."""
    path = Path(path)
    try:
        check_npz_sizes(path)
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise BadInput(f"golden set not found: {path}") from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, MemoryError) as e:
        raise BadInput(
            f"{path} is not a golden set file ({type(e).__name__}: {e})",
            hint="make one with: edgequal golden make MODEL --inputs NPZ -o G.npz",
        ) from e
    if MANIFEST_KEY not in arrays:
        raise BadInput(
            f"{path} has no manifest: not an edgequal golden set", hint="edgequal golden make"
        )
    try:
        manifest = json.loads(arrays.pop(MANIFEST_KEY).tobytes().decode())
    except ValueError as e:
        raise BadInput(f"{path}: the manifest is not valid JSON ({e})") from e
    if manifest.get("format") != FORMAT:
        raise BadInput(
            f"{path}: unknown golden format {manifest.get('format')!r}, expected {FORMAT}"
        )
    cases: dict[str, GoldenCase] = {
        name: GoldenCase(name, {}, {}) for name in manifest.get("cases", [])
    }
    for key, a in arrays.items():
        kind, _, rest = key.partition("/")
        case_name, _, tensor = rest.partition("/")
        if kind not in ("inputs", "outputs") or not tensor:
            raise BadInput(f"{path}: unexpected array '{key}'")
        case = cases.setdefault(case_name, GoldenCase(case_name, {}, {}))
        getattr(case, kind)[tensor] = a
    if not cases:
        raise BadInput(f"{path}: the golden set has no cases")
    return GoldenSet(manifest, list(cases.values()))


def split_case_arrays(
    arrays: Mapping[str, np.ndarray], default_case: str = "case0"
) -> dict[str, dict]:
    """Group ``CASE/NAME`` arrays by case; plain ``NAME`` arrays form one case named ``default_case``."""
    cases: dict[str, dict] = {}
    for key, a in arrays.items():
        case, sep, name = key.rpartition("/")
        cases.setdefault(case if sep else default_case, {})[name] = a
    return cases


def load_npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an ``.npz`` file, without pickle; BadInput for anything else."""
    try:
        check_npz_sizes(path)
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise BadInput(f"file not found: {path}") from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, MemoryError) as e:
        raise BadInput(f"{path} is not a readable .npz file ({type(e).__name__}: {e})") from e


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


__all__ = [
    "FORMAT",
    "GoldenCase",
    "GoldenMismatch",
    "GoldenSet",
    "file_sha256",
    "load_npz_arrays",
    "read_golden",
    "split_case_arrays",
    "write_golden",
]
