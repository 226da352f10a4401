"""Making golden sets on the host: raw inputs in, reference outputs from the reference runtime.

``--inputs`` is an ``.npz`` whose array names are the model's input names (one
case), or ``CASE/INPUT`` names (several cases), or a directory of such files (one
case per file, named after the file). ``--outputs`` follows the same naming with
output names. When outputs are not given they come from onnxruntime (ONNX) or
LiteRT (TFLite) run here on the host, and the manifest records which and its version.

The manifest's ``preprocessing`` is the input contract (``contract/input_contract.py``):
dtype, layout and the value range seen, read from the inputs, and what the model was
trained on (layout, range, mean/std or scale, colour order, resize) from flags or a
TOML file next to the inputs (``DIR/preprocessing.toml`` for a directory,
``NAME.toml`` beside ``NAME.npz``)::

    range = [0.0, 1.0]            # top-level keys: every input
    [inputs.image]
    layout = "NCHW"
    mean = [0.485, 0.456, 0.406]
    std = [0.229, 0.224, 0.225]
    color_order = "RGB"
    resize = [224, 224]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from edgequal.agent.runtimes import RuntimeOptions, runtime_class
from edgequal.contract.artifacts import file_sha256
from edgequal.contract.drift_rules import Tolerance, parse_decision_rule
from edgequal.contract.errors import AgentError
from edgequal.contract.golden import (
    MANIFEST_KEY,
    NPZ_LOCK,
    GoldenCase,
    load_npz_arrays,
    split_case_arrays,
    write_golden,
)
from edgequal.contract.runtimes import runtime_for

from .errors import UsageError
from .preprocessing import read_preprocessing_toml, resolve_declared


def read_case_inputs(source: Path, names: Sequence[str] = ()) -> dict[str, dict[str, np.ndarray]]:
    """Cases from an ``.npz`` (``NAME`` or ``CASE/NAME`` arrays) or a directory of ``.npz`` files.

    ``names`` are the model's input names: a key that is one is a plain ``NAME`` even where
    it holds a ``/`` (``split_case_arrays``)."""
    source = Path(source)
    if source.is_dir():
        files = sorted(source.glob("*.npz"))
        if not files:
            raise UsageError(
                f"{source} holds no .npz files", hint="one .npz per case, arrays named by input"
            )
        cases = {}
        for f in files:
            for case, arrays in split_case_arrays(_load(f), f.stem, names).items():
                cases[case] = arrays
        return cases
    return split_case_arrays(_load(source), names=names)


def preprocessing_toml_for(inputs: Path) -> Path:
    """Where the TOML beside ``inputs`` would be: ``DIR/preprocessing.toml`` or ``NAME.toml``."""
    inputs = Path(inputs)
    return inputs / "preprocessing.toml" if inputs.is_dir() else inputs.with_suffix(".toml")


def _load(path: Path) -> dict[str, np.ndarray]:
    try:
        return load_npz_arrays(path)
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e


def make_golden(
    model: Path,
    inputs: Path | dict[str, dict[str, np.ndarray]],
    out: Path,
    *,
    outputs: Path | None = None,
    decision: str | None = None,
    tolerances: dict | None = None,
    preprocessing: Mapping | None = None,
    runtime: str = "auto",
    on_warning: Callable[[str], None] | None = None,
    edge_shapes: list[dict] | None = None,
    raw: Path | None = None,
    pipeline: Path | None = None,
    reference_inputs: Path | None = None,
    attach: RawAttachments | None = None,
    signed: dict | None = None,
    model_signature: Path | None = None,
    trusted_keys: Sequence[Path] = (),
    intermediates: bool = False,
    labels: Path | None = None,
    labels_k: int | None = None,
    labels_output: str | None = None,
) -> str:
    """Write a golden set for ``model``; returns its sha256.

    Inputs are checked against the model first: a mismatch raises UsageError naming
    the input, what the model expects and what the file holds. ``preprocessing`` is
    what the model was trained on, ``{"*": keys for every input, NAME: keys}``; a TOML
    beside the inputs is read under it. Each input-contract mismatch the qualification
    would flag on this model goes to ``on_warning``. ``edge_shapes`` (``[{"label",
    "shapes"}]``, checked by the plan's rule and against the model's declared inputs) are
    recorded in the manifest: every qualification with this set measures them too.

    With ``raw`` (a directory or ``cases.csv`` of raw files) and ``pipeline`` (its TOML)
    instead of ``inputs``, the cases are the raw files (``host/pipeline.py``): the
    pipeline runs here to make their tensors, and the manifest records it for the device
    to run; ``reference_inputs`` are the tensors the training pipeline fed the model.
    ``attach`` is what such a golden set records beside the tensors (set by that path).

    ``model_signature`` (an OpenSSF Model Signing signature) is verified against
    ``trusted_keys`` before the model is loaded here (:func:`verify_model_signature`); the
    manifest's ``model.signature`` then records its digest, the OMS manifest digest and
    the key, as a report's ``results.model_signature`` does.

    ``intermediates`` also records every intermediate tensor of each case's reference
    run (docs/divergence.md): a model changed since is localised node by node against them.

    ``labels`` (a CSV or JSON file, ``host/labels.py``) gives each case its true class;
    the manifest records them with the reference's own score (top-1 and top-k of
    ``labels_k``, ranked on ``labels_output``): docs/accuracy.md.
    """
    from .model_file import check_model_file

    model = Path(model)
    check_model_file(model, runtime)  # the same one line qualify gives for a non-model
    edges = _checked_edge_shapes(edge_shapes)
    if model_signature is not None:
        signed = verify_model_signature(model, Path(model_signature), trusted_keys)
    elif trusted_keys:
        raise UsageError("--trusted-key goes with --model-signature SIG")
    if raw is not None and intermediates:
        raise UsageError("--intermediates goes with --inputs (tensors), not --raw")
    if raw is not None:
        return _make_raw_golden(
            model, raw, pipeline, out, reference_inputs,
            outputs=outputs, decision=decision, tolerances=tolerances, preprocessing=preprocessing,
            runtime=runtime, on_warning=on_warning, edge_shapes=edge_shapes, signed=signed,
            labels=labels, labels_k=labels_k, labels_output=labels_output,
        )  # fmt: skip
    if pipeline is not None or reference_inputs is not None:
        raise UsageError("--pipeline and --reference-inputs go with --raw DIR")
    if decision:
        try:
            parse_decision_rule(decision)
        except AgentError as e:
            raise UsageError(str(e), hint=e.hint) from e
    toml = preprocessing_toml_for(inputs) if isinstance(inputs, (str, Path)) else None
    from_toml = read_preprocessing_toml(toml) if toml is not None and toml.is_file() else None
    try:
        name = runtime_for(model, runtime)
        cls = runtime_class(name)
        rt = cls(RuntimeOptions(threads=1))
        rt.load(model)
        case_inputs = (
            read_case_inputs(inputs, [s.name for s in rt.inputs()])
            if isinstance(inputs, (str, Path))
            else inputs
        )
        cases = []
        for case_name, feeds in case_inputs.items():
            from edgequal.contract.tensors import check_feeds

            check_feeds(rt.inputs(), feeds, where=f"case '{case_name}' input")
            cases.append(GoldenCase(case_name, dict(feeds)))
        if outputs is not None:
            given = split_case_arrays(_load(Path(outputs)), names=[o.name for o in rt.outputs()])
            for case in cases:
                if case.name not in given:
                    raise UsageError(
                        f"--outputs has no outputs for case '{case.name}'",
                        hint=f"arrays are named CASE/OUTPUT; it holds cases: "
                        f"{', '.join(sorted(given)[:8]) or 'none'}",
                    )
                check_feeds(rt.outputs(), given[case.name], where=f"case '{case.name}' output")
                case.outputs = given[case.name]
            reference = {"runtime": "given", "source": Path(outputs).name}
        else:
            for case in cases:
                case.outputs = rt.run(case.inputs)
            reference = rt.describe()
        if intermediates:
            _record_intermediates(rt, cases)
        check_edge_shapes_fit(edges, rt.inputs())
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e
    tolerances = _tolerances_for_outputs(tolerances, [o.name for o in rt.outputs()])
    from edgequal.contract.input_contract import contract_mismatches, describe_inputs

    names = [s.name for s in rt.inputs()]
    try:
        contract = describe_inputs(
            [c.inputs for c in cases], resolve_declared(names, from_toml, preprocessing)
        )
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e
    for m in contract_mismatches(contract, rt.inputs()):
        if on_warning is not None:
            on_warning(f"{m['message']} ({m['hint']})")
    manifest = {
        "model": {
            "name": model.name,
            "sha256": file_sha256(model),
            **({"signature": signed} if signed is not None else {}),
        },
        "inputs": [s.to_dict() for s in rt.inputs()],
        "outputs": [s.to_dict() for s in rt.outputs()],
        "preprocessing": contract.to_json(),
        "reference": reference,
        "tolerances": tolerances or {},
        "decision": decision,
    }
    if edges:
        manifest["edge_shapes"] = edges
    if labels is not None:
        from .labels import read_labels_file, with_reference_score

        names = [c.name for c in cases]
        read = read_labels_file(labels, names, k=labels_k, output=labels_output)
        manifest["labels"] = with_reference_score(read, decision, cases).to_json()
    elif labels_k is not None or labels_output is not None:
        raise UsageError("--labels-k and --labels-output go with --labels FILE")
    rt.close()
    if attach is None:
        return write_golden(Path(out), manifest, cases)
    for case in cases:
        case.raw = attach.raw[case.name]
        case.reference_inputs = attach.reference_inputs.get(case.name, {})
    manifest["pipeline"] = attach.pipeline
    if outputs is None:
        manifest["reference"]["preprocessing"] = "the declared pipeline, on the host"
    return write_golden(Path(out), manifest, cases, attach.assets)


def _record_intermediates(rt, cases: list[GoldenCase]) -> None:
    """Each case's intermediate tensors from one kept run (``Runtime.run_keeping``)."""
    nodes = rt.tensor_nodes()
    if nodes is None:
        raise UsageError(f"{rt.name} cannot keep intermediate tensors (--intermediates)")
    for case in cases:
        names = [n for node in nodes for n in node["outputs"] if n and n not in case.inputs]
        kept = rt.run_keeping(case.inputs, names)
        case.intermediates = {n: a for n, a in kept.items() if n not in case.outputs}


def verify_model_signature(model: Path, signature: Path, trusted_keys: Sequence[Path]) -> dict:
    """Verify ``signature`` (OpenSSF Model Signing) over ``model`` against ``trusted_keys``
    (PEM public keys) before the host loads the model, with the verifier the agent runs
    (``agent/model_signature.py``, in a child process) over the model as the agent lays
    it out: the file, or a directory of the model and its external-data files. Returns
    what the golden set records (``{"sha256", "oms_manifest_sha256", "key"}``); a model
    that does not match, or a key not given, is VerificationFailed (exit 1)."""
    import shutil
    import tempfile

    from edgequal.agent.model_signature import SigningPolicy, key_problem, verify
    from edgequal.contract.errors import ModelRejected
    from edgequal.contract.onnx_external_data import check_external_data

    from .errors import VerificationFailed
    from .model_file import check_model_signature_file

    check_model_signature_file(signature)  # exit 2 for a file that is no OMS signature
    if not trusted_keys:
        raise UsageError(
            "--model-signature needs --trusted-key PUB: the producer's public key to verify it with"
        )
    for key in trusted_keys:
        if not Path(key).is_file():
            raise UsageError(f"trusted key not found: {key}")
        problem = key_problem(Path(key))
        if problem is not None:
            raise UsageError(
                f"trusted key {Path(key).name} is {problem}",
                hint="give the producer's EC public key (PEM) the model was signed with",
            )
    try:
        extra = sorted({r.location for r in check_external_data(model)})
    except ModelRejected as e:
        raise UsageError(f"{model}: {e}", hint=e.hint) from None
    policy = SigningPolicy(trusted_keys=tuple(Path(k) for k in trusted_keys))
    if not extra:
        result = verify(model, signature, policy)
    else:
        # The producer signed the model's directory; only the files the model names are
        # part of it, as in the agent's bundle (nothing else beside the model counts).
        with tempfile.TemporaryDirectory(prefix="edgequal-signed-") as tmp:
            for name in [model.name, *extra]:
                shutil.copyfile(model.parent / name, Path(tmp) / name)
            result = verify(Path(tmp), signature, policy)
    if result["status"] != "verified":
        raise VerificationFailed(
            f"model signature {signature.name}: {result['reason']}",
            hint="no golden set was made: sign the model again, or give its producer's key",
        )
    return {
        "sha256": file_sha256(signature),
        "oms_manifest_sha256": result.get("manifest_sha256"),
        "key": result["key"],
    }


@dataclass(frozen=True)
class RawAttachments:
    """What a golden set of raw files holds beside its tensors: the raw files and reference
    tensors per case, the pipeline's JSON, its assets (tokenizers by sha256)."""

    raw: dict[str, dict[str, bytes]]
    reference_inputs: dict[str, dict]
    pipeline: dict
    assets: dict[str, bytes]


def _make_raw_golden(model, raw, pipeline_toml, out, reference_inputs, **kwargs) -> str:
    """:func:`make_golden` for raw files (``host/pipeline.py``)."""
    from edgequal.contract.input_contract import DECLARED_KEYS

    from .pipeline import declared_pipeline, read_raw_cases, read_reference_inputs, run_on_host

    if pipeline_toml is None:
        raise UsageError("--raw needs --pipeline pipeline.toml: the stages from file to tensor")
    try:
        rt = runtime_class(runtime_for(model, kwargs["runtime"]))(RuntimeOptions(threads=1))
        rt.load(model)
        specs = rt.inputs()
        rt.close()
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e
    pipeline, assets, declared = declared_pipeline(
        Path(pipeline_toml), kwargs.pop("preprocessing"), specs
    )
    raw_cases = read_raw_cases(Path(raw), pipeline)
    tensors, libraries = run_on_host(pipeline, assets, raw_cases)
    names = [s.name for s in specs]
    refs = read_reference_inputs(reference_inputs, raw_cases, names) if reference_inputs else {}
    recorded = type(pipeline)(pipeline.inputs, libraries)
    attach = RawAttachments(raw_cases, refs, recorded.to_json(), assets)
    contract = {n: {k: v for k, v in d.items() if k in DECLARED_KEYS} for n, d in declared.items()}
    warn = kwargs.get("on_warning")
    if kwargs.get("outputs") is None and warn is not None:
        warn(
            "no --outputs: the references come from the declared pipeline and the model run "
            "on this host, so a preprocessing difference from training cannot show; give the "
            "training framework's outputs to see it"
        )
    return make_golden(model, tensors, out, **kwargs, preprocessing=contract, attach=attach)


TOLERANCE_HINT = (
    "write OUTPUT=ATOL,RTOL (e.g. probs=1e-3,1e-2) or OUTPUT=CLASS (fp32, fp16, int8); "
    "OUTPUT * for every output"
)


def parse_tolerance_args(items: list[str] | None) -> dict | None:
    """``--tolerance OUTPUT=ATOL,RTOL`` or ``OUTPUT=CLASS`` into the manifest's tolerances
    (``{output: {"atol", "rtol"} | {"class"}}``); ``*`` stands for every output."""
    out: dict = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value:
            raise UsageError(f"cannot read --tolerance '{item}'", hint=TOLERANCE_HINT)
        if name in out:
            raise UsageError(f"--tolerance names the output '{name}' twice")
        if "," in value:
            parts = value.split(",")
            try:
                atol, rtol = (float(x) for x in parts)
            except ValueError:
                raise UsageError(f"cannot read --tolerance '{item}'", hint=TOLERANCE_HINT) from None
            out[name] = {"atol": atol, "rtol": rtol}
        else:
            out[name] = {"class": value}
        try:
            Tolerance.from_dict(out[name])
        except AgentError as e:
            raise UsageError(f"--tolerance '{item}': {e}", hint=e.hint or TOLERANCE_HINT) from e
    return out or None


def _tolerances_for_outputs(tolerances: dict | None, outputs: list[str]) -> dict:
    """Per-output tolerances checked against the model's outputs, ``*`` spread over those
    not named; UsageError naming an output the model lacks or a bad tolerance."""
    tolerances = dict(tolerances or {})
    every = tolerances.pop("*", None)
    for name, tol in tolerances.items():
        if name not in outputs:
            raise UsageError(
                f"--tolerance names '{name}', not an output of the model "
                f"(its outputs: {', '.join(outputs)})"
            )
        try:
            Tolerance.from_dict(tol)
        except AgentError as e:
            raise UsageError(f"tolerance of output '{name}': {e}", hint=e.hint) from e
    if every is not None:
        for name in outputs:
            tolerances.setdefault(name, dict(every))
    return tolerances


def _checked_edge_shapes(edge_shapes: list[dict] | None) -> list[dict]:
    """``--edge-shape`` values by the plan's own rule (labels, sizes, limits); UsageError."""
    from edgequal.contract.golden import check_edge_shapes

    if not edge_shapes:
        return []
    try:
        return check_edge_shapes(list(edge_shapes), "--edge-shape")
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e


def check_edge_shapes_fit(edges: list[dict], inputs) -> None:
    """UsageError naming an edge shape's input the model lacks, or whose declared fixed dims
    its sizes contradict (``agent.golden.edge_shape_misfit``, the rule the worker applies)."""
    from edgequal.contract.golden import edge_shape_misfit

    for edge in edges:
        misfit = edge_shape_misfit(edge["shapes"], inputs)
        if misfit is not None:
            raise UsageError(f"--edge-shape '{edge['label']}': {misfit['message']}")


def recorded_model(golden: Path) -> dict:
    """The model a golden set was made for (``{"name", "sha256"}`` from its manifest; {} if none).

    Reads the manifest only, without pickle; UsageError for a file that is not a golden set.
    """
    import json
    import zipfile

    try:
        with NPZ_LOCK, np.load(golden, allow_pickle=False) as z:
            if MANIFEST_KEY not in z.files:
                raise UsageError(f"{golden} has no manifest: not an edgequal golden set")
            manifest = json.loads(z[MANIFEST_KEY].tobytes().decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"golden set not found: {golden}") from None
    except RecursionError:
        raise UsageError(
            f"{golden}: its manifest is nested too deeply to be a golden set"
        ) from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, UnicodeDecodeError) as e:
        raise UsageError(f"{golden} is not a golden set file ({type(e).__name__}: {e})") from e
    model = manifest.get("model") if isinstance(manifest, dict) else None
    return model if isinstance(model, dict) else {}


def check_golden_for_model(golden: Path, model_digest: str, *, allow_mismatch: bool) -> str | None:
    """Refuse a golden set made for another model file (UsageError, exit 2).

    The golden set records the sha256 of the model its reference outputs came
    from. A different model (retrained, re-exported, quantized) usually means the
    references are not what this model should output. ``allow_mismatch`` lets it
    through (say, to measure how far a quantized build drifts from the float
    references); the returned note says so. None when the digests agree or the
    golden set records none.
    """
    recorded = recorded_model(golden)
    digest = recorded.get("sha256")
    if not digest or digest == model_digest:
        return None
    made_for = f"{recorded.get('name') or 'a model'} (sha256 {digest})"
    if allow_mismatch:
        return f"golden set {golden.name} was made for {made_for}, not this model: compared anyway"
    raise UsageError(
        f"golden set {golden} was made for {made_for}, not for this model (sha256 {model_digest})",
        hint="make one for this model with `edgequal golden make`, or pass "
        "--allow-golden-mismatch to compare against it anyway",
    )
