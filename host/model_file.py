"""The model file as the host checks it before anything is sent to a device.

- :func:`check_model_file`: the file exists and is a model of the kind its runtime
  takes (``contract/model_file.py``, from its framing; a text file renamed
  ``.onnx`` is refused here, exit 2, not uploaded to fail on the board).
- :func:`check_shapes`: every ``--shape`` names an input the model declares, with its
  rank and its fixed dimensions. The declared inputs are read without a runtime session:
  an ONNX graph's inputs with ``onnx`` (external data not loaded), a TFLite model's with
  LiteRT's interpreter where it is installed on the host (else the device checks).
- :func:`check_model_signature_file`: a ``--model-signature`` exists, is at most a few
  MiB, and is an OMS signature (UTF-8 JSON, a Sigstore bundle); else exit 2, not sent.
"""

from __future__ import annotations

from pathlib import Path

from edgequal.contract.errors import AgentError
from edgequal.contract.tensors import TensorSpec

from .errors import UsageError


def check_model_file(model: Path, runtime: str = "auto") -> str:
    """The runtime ``model`` is for; UsageError when it is missing or is no such model."""
    from edgequal.contract.runtimes import model_file_problem, runtime_for, runtime_kind

    model = Path(model)
    if not model.is_file():
        raise UsageError(f"model file not found: {model}")
    try:
        name = runtime_for(model, runtime)
        problem = model_file_problem(model, name)
    except AgentError as e:
        raise UsageError(str(e), hint=e.hint) from e
    except OSError as e:
        raise UsageError(f"cannot read model {model}: {e.strerror}") from e
    if problem is not None:
        kind = runtime_kind(name).model_kind
        raise UsageError(
            f"{model} is not {kind}: {problem}; nothing was sent",
            hint="give the exported .onnx or .tflite file itself",
        )
    return name


def check_model_signature_file(signature: Path) -> None:
    """UsageError (exit 2) when ``signature`` is missing or is no OMS signature
    (``contract/model_signature_file.py``): refused here, before it is read whole or sent."""
    from edgequal.contract.model_signature_file import signature_problem

    signature = Path(signature)
    if not signature.is_file():
        raise UsageError(f"model signature not found: {signature}")
    problem = signature_problem(signature)
    if problem is not None:
        raise UsageError(
            f"model signature {signature.name} is {problem}",
            hint="give the signature file `model_signing sign` wrote for this model",
        )


def declared_inputs(model: Path, runtime: str) -> list[TensorSpec] | None:
    """The inputs ``model`` declares (dynamic dims as names or None), or None when this
    host cannot read them (TFLite without LiteRT installed)."""
    reader = INPUT_READERS.get(runtime)
    return reader(Path(model)) if reader is not None else None


def _onnx_inputs(model: Path) -> list[TensorSpec]:
    import onnx
    from onnx import helper

    try:
        proto = onnx.load(str(model), load_external_data=False)
    except Exception as e:  # protobuf's DecodeError and friends: not a model after all
        raise UsageError(f"{model} is not an ONNX model: {e}; nothing was sent") from e
    initializers = {i.name for i in proto.graph.initializer}
    specs = []
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim
        ]
        try:
            dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        except (KeyError, TypeError, ValueError):
            dtype = str(tensor.elem_type)
        specs.append(TensorSpec(value.name, dtype, dims))
    return specs


def _tflite_inputs(model: Path) -> list[TensorSpec] | None:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    import numpy as np

    try:
        details = Interpreter(model_path=str(model)).get_input_details()
    except Exception:  # the device's runtime says why, as a finding
        return None
    return [
        TensorSpec(
            d["name"],
            np.dtype(d["dtype"]).name,
            [int(s) if s >= 0 else None for s in d.get("shape_signature", d["shape"])],
        )
        for d in details
    ]


INPUT_READERS = {"onnxruntime": _onnx_inputs, "litert": _tflite_inputs}
"""How the host reads the inputs a model of each runtime (``contract/runtimes.py``) declares,
without a session; a test holds its keys to the registry's names."""


def check_shapes(model: Path, runtime: str, shapes: dict[str, list[int]]) -> None:
    """UsageError naming the ``--shape`` that does not fit the input the model declares."""
    if not shapes:
        return
    inputs = declared_inputs(model, runtime)
    if inputs is None:
        return
    by_name = {s.name: s for s in inputs}
    for name, dims in shapes.items():
        flag = f"--shape {name}={'x'.join(str(d) for d in dims)}"
        spec = by_name.get(name)
        if spec is None:
            raise UsageError(
                f"{flag}: the model has no input '{name}' "
                f"(its inputs: {', '.join(by_name) or 'none'})",
                hint="name one of the model's inputs: "
                + (", ".join(f"--shape {_shape_pattern(s)}" for s in inputs) or "it has none"),
            )
        if len(spec.shape) != len(dims):
            raise UsageError(
                f"{flag}: the model's input '{name}' is {spec.describe()}: "
                f"{len(spec.shape)} dimensions, the flag gives {len(dims)}",
                hint=f"give one size per dimension: --shape {_shape_pattern(spec)}",
            )
        for i, (want, got) in enumerate(zip(spec.shape, dims)):
            if isinstance(want, int) and want > 0 and want != got:
                raise UsageError(
                    f"{flag}: the model's input '{name}' is {spec.describe()}: "
                    f"dimension {i} is fixed at {want}, the flag gives {got}",
                    hint=f"only the named dimensions may change: --shape {_shape_pattern(spec)}",
                )


def _shape_pattern(spec: TensorSpec) -> str:
    """``NAME=1x3xHEIGHTxWIDTH``: the fixed sizes as they are, a dynamic one by its name
    in capitals (``N`` when it has none), for the user to fill in."""
    dims = [
        str(d) if isinstance(d, int) and d > 0 else (str(d).upper() if d else "N")
        for d in spec.shape
    ]
    return f"{spec.name}={'x'.join(dims)}"
