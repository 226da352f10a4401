"""Golden sets of raw files: the declared pipeline read, checked and run on the host.

``edgequal golden make MODEL --raw DIR --pipeline pipeline.toml`` reads raw cases
(:func:`read_raw_cases`: one case per file stem, or one per row of a ``cases.csv``
manifest for a model with several inputs), checks the pipeline against the model
(``contract/pipeline_spec.py``: the input contract's vocabulary plus its stage keys, one
parser for both), runs it here with the same stages the device runs
(``agent/pipeline/stages.py``) so a raw file the device would refuse is refused now,
and hands the tensors to ``golden.make_golden`` with the raw files, any reference
tensors (``--reference-inputs``) and the tokenizers beside them.
"""

from __future__ import annotations

import csv
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from edgequal.contract.errors import AgentError

from .errors import UsageError, printable

RAW_SUFFIXES = (".png", ".jpg", ".jpeg", ".wav", ".txt")
"""The raw files a directory's cases are read from (anything else there is not a case)."""
MANIFEST_NAME = "cases.csv"
# A raw file larger than this is not a representative input of an edge model.
MAX_RAW_BYTES = 64 << 20


def read_raw_cases(source: Path, pipeline) -> dict[str, dict[str, bytes]]:
    """``{case: {input: bytes}}`` from a directory of raw files or a ``cases.csv``.

    A directory: one case per file stem, every input reading that file (one input, or
    text inputs sharing one text: ids and attention mask). A manifest (``DIR/cases.csv``
    or the CSV itself): a ``case`` column and one column per input, paths relative to it.
    """
    source = Path(source)
    names = list(pipeline.inputs)
    manifest = source / MANIFEST_NAME if source.is_dir() else source
    if manifest.is_file() and (source.is_dir() or source.suffix == ".csv"):
        return _from_manifest(manifest, names)
    if not source.is_dir():
        raise UsageError(f"--raw {source}: not a directory of raw files or a .csv manifest")
    kinds = {p.decode for p in pipeline.inputs.values()}
    if len(names) > 1 and kinds != {"text"}:
        raise UsageError(
            f"the model has {len(names)} inputs ({', '.join(names)}): one file per case cannot feed them",
            hint=f"list each case's files in {source / MANIFEST_NAME}: case,{','.join(names)}",
        )
    cases: dict[str, dict[str, bytes]] = {}
    base = os.path.realpath(source)
    for f in sorted(source.iterdir()):
        if not f.is_file() or f.suffix.lower() not in RAW_SUFFIXES:
            continue
        _check_utf8_name(f)
        _check_inside(base, f, f"--raw {printable(source)}: {printable(f.name)}")
        if f.stem in cases:
            raise UsageError(f"--raw {source}: two files for case '{f.stem}'")
        data = _read(f)
        cases[f.stem] = {n: data for n in names}
    if not cases:
        raise UsageError(
            f"--raw {source} holds no raw files", hint=f"one of {', '.join(RAW_SUFFIXES)} per case"
        )
    return cases


def _from_manifest(path: Path, names: list[str]) -> dict[str, dict[str, bytes]]:
    try:
        rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"{path}: not a readable CSV manifest ({e})") from None
    if not rows:
        raise UsageError(f"{path}: no cases")
    header = set(rows[0])
    missing = [c for c in ("case", *names) if c not in header]
    if missing:
        raise UsageError(
            f"{path}: no column '{missing[0]}'", hint=f"columns: case,{','.join(names)}"
        )
    cases = {}
    base = os.path.realpath(path.parent)
    for i, row in enumerate(rows, 2):
        case = (row.get("case") or "").strip()
        if not case or case in cases:
            raise UsageError(f"{path} line {i}: case name {'missing' if not case else 'repeated'}")
        files = {}
        for n in names:
            rel = (row.get(n) or "").strip()
            where = f"{printable(path)} line {i} column {n}: {rel[:200]!r}"
            if "\x00" in rel:  # no path holds one: os calls raise ValueError on it
                raise UsageError(f"{where} holds a NUL byte, which no file name can")
            if not rel or rel.startswith("/") or ".." in Path(rel).parts:
                raise UsageError(
                    f"{where} is {'empty' if not rel else 'outside --raw ' + printable(path.parent)}",
                    hint="name each raw file relative to the manifest, inside its directory",
                )
            files[n] = _check_inside(base, path.parent / rel, where)
        cases[case] = {n: _read(f) for n, f in files.items()}
    return cases


def _check_utf8_name(f: Path) -> None:
    """A case is named after its file: a name that is not UTF-8 cannot be one (it would reach
    the golden manifest and the device as surrogate escapes)."""
    try:
        f.name.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(
            f"raw file {printable(f)}: its name is not UTF-8, and a case is named after its file",
            hint="rename it, or list it under a UTF-8 case name in cases.csv",
        ) from None


def _check_inside(base_real: str, path: Path, where: str) -> Path:
    """``path`` when it resolves (symlinks followed) to a file below ``base_real``; a raw
    file from elsewhere on the host would be copied into the golden set and pushed to the
    device, so it is refused, as an ONNX model's external data out of its directory is."""
    real = os.path.realpath(path)
    if not real.startswith(base_real.rstrip(os.sep) + os.sep):
        raise UsageError(
            f"{where} resolves to {printable(real)}, outside --raw {printable(base_real)}",
            hint="copy the file into the raw directory if it belongs in the golden set",
        )
    return Path(real)


def _read(path: Path) -> bytes:
    try:
        if path.stat().st_size > MAX_RAW_BYTES:
            raise UsageError(
                f"{printable(path)}: {path.stat().st_size} bytes, more than a raw case may hold"
            )
        return path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read raw file {printable(path)}: {e.strerror}") from None


def read_reference_inputs(path: Path, cases, names: list[str]) -> dict[str, dict]:
    """``{case: {input: array}}`` from ``--reference-inputs`` (``CASE/INPUT`` arrays); each
    named case and input must exist (shapes are not checked: a transposed reference is
    evidence the device reports)."""
    from edgequal.contract.golden import load_npz_arrays, split_case_arrays

    try:
        given = split_case_arrays(load_npz_arrays(Path(path)), names=names)
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e
    for case, arrays in given.items():
        if case not in cases:
            raise UsageError(f"--reference-inputs has case '{case}', which --raw does not")
        for name, a in arrays.items():
            if name not in names:
                raise UsageError(
                    f"--reference-inputs case '{case}' has input '{name}', which the model does not have",
                    hint=f"inputs: {', '.join(names)}",
                )
            if a.dtype.kind not in "biuf":
                raise UsageError(f"--reference-inputs case '{case}' input '{name}' is {a.dtype}")
    return given


def declared_pipeline(
    toml: Path, flags: dict | None, specs
) -> tuple[object, dict[str, bytes], dict[str, dict]]:
    """``(Pipeline, assets, declared)`` from a pipeline TOML with the contract flags over it
    (``{"*": keys}``), checked against the model's inputs; UsageError (exit 2) otherwise.

    ``assets`` are the tokenizer files by sha256; ``declared`` the per-input keys, whose
    input-contract part the golden manifest records as its ``preprocessing``.
    """
    from edgequal.contract.pipeline_spec import resolve_pipeline

    from .preprocessing import read_preprocessing_toml, resolve_declared

    toml = Path(toml)
    declared = read_preprocessing_toml(toml, stages=True)
    for k, v in ((flags or {}).get("*") or {}).items():
        declared.setdefault("*", {})[k] = v
    assets: dict[str, bytes] = {}

    def tokenizer_digest(name: str) -> str:
        data = _read(toml.parent / name)
        digest = hashlib.sha256(data).hexdigest()
        assets[digest] = data
        return digest

    try:
        pipeline = resolve_pipeline(declared, specs, tokenizer_digest, source=str(toml))
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e
    return pipeline, assets, resolve_declared([s.name for s in specs], declared)


def run_on_host(pipeline, assets, raw_cases, on_library: Callable | None = None):
    """Each case's tensors from the declared pipeline run here, and the libraries it ran with;
    UsageError naming the file's case for a raw file a stage refuses."""
    from edgequal.agent.pipeline.stages import PipelineStages

    stages = PipelineStages(pipeline, assets)
    try:
        libraries = stages.libraries()
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e
    cases = {}
    for case, raw in raw_cases.items():
        with _NativeStderr() as native:
            try:
                cases[case] = stages.preprocess(stages.decode(raw))
            except AgentError as e:
                native.drop()  # e.g. a tokenizer's Rust panic report: the one line says it
                raise UsageError(f"raw case '{case}' {e}", hint=e.hint) from e
    return cases, libraries


class _NativeStderr:
    """File descriptor 2 held in a temporary file while a stage runs, then written back;
    :meth:`drop` discards it. A Rust panic inside ``tokenizers`` prints its report (and a
    backtrace under ``RUST_BACKTRACE``) straight to fd 2 before Python sees the exception;
    the refusal of that case is one line, so the report is dropped with it."""

    def __enter__(self):
        import sys
        import tempfile

        sys.stderr.flush()
        self._held = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._held.fileno(), 2)
        self._keep = True
        return self

    def drop(self) -> None:
        """Discard what the stage wrote to fd 2."""
        self._keep = False

    def __exit__(self, *exc) -> None:
        import sys

        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        if self._keep:
            self._held.seek(0)
            text = self._held.read()
            if text:
                with open(2, "wb", closefd=False) as out:
                    out.write(text)
        self._held.close()
