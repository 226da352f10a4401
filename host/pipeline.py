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
from collections.abc import Callable
from pathlib import Path

from edgequal.contract.errors import AgentError

from .errors import UsageError

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
    for f in sorted(source.iterdir()):
        if not f.is_file() or f.suffix.lower() not in RAW_SUFFIXES:
            continue
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
    for i, row in enumerate(rows, 2):
        case = (row.get("case") or "").strip()
        if not case or case in cases:
            raise UsageError(f"{path} line {i}: case name {'missing' if not case else 'repeated'}")
        cases[case] = {n: _read(path.parent / (row.get(n) or "").strip()) for n in names}
    return cases


def _read(path: Path) -> bytes:
    try:
        if path.stat().st_size > MAX_RAW_BYTES:
            raise UsageError(f"{path}: {path.stat().st_size} bytes, more than a raw case may hold")
        return path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read raw file {path}: {e.strerror}") from None


def read_reference_inputs(path: Path, cases, names: list[str]) -> dict[str, dict]:
    """``{case: {input: array}}`` from ``--reference-inputs`` (``CASE/INPUT`` arrays); each
    named case and input must exist (shapes are not checked: a transposed reference is
    evidence the device reports)."""
    from edgequal.contract.golden import load_npz_arrays, split_case_arrays

    try:
        given = split_case_arrays(load_npz_arrays(Path(path)))
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
        try:
            cases[case] = stages.preprocess(stages.decode(raw))
        except AgentError as e:
            raise UsageError(f"raw case '{case}' {e}", hint=e.hint) from e
    return cases, libraries
