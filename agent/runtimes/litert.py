"""LiteRT adapter: ``ai_edge_litert``, falling back to ``tflite_runtime`` on older device images.

XNNPACK (LiteRT's default CPU delegate) is on unless the options turn it off.
Custom-op libraries and delegates are never loaded from pushed content.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from edgequal.contract.errors import ModelRejected, RuntimeUnavailable
from edgequal.contract.tensors import TensorSpec

from .base import Runtime

_MODULES = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter")
# The op resolvers a kernel path may name (docs/divergence.md): LiteRT's OpResolverType.
OP_RESOLVERS = {
    "auto": "AUTO",  # builtin kernels with the default delegates (XNNPACK)
    "builtin": "BUILTIN",  # the same resolver by its other name
    "builtin-ref": "BUILTIN_REF",  # the reference kernels: plain C++, no optimisation
    "builtin-no-delegates": "BUILTIN_WITHOUT_DEFAULT_DELEGATES",  # optimised, no XNNPACK
}
_NO_DELEGATES = "builtin-no-delegates"


def _numpy_major() -> int:
    return int(np.__version__.split(".")[0])


def tflite_runtime_numpy_problem(tflite_version: str, numpy_version: str) -> str | None:
    """The message for tflite-runtime builds that cannot work with the installed numpy.

    tflite-runtime 2.14 and older were compiled against numpy 1.x; with numpy 2 they
    fail to import or to read tensors.
    """
    try:
        major, minor = (int(x) for x in tflite_version.split(".")[:2])
    except ValueError:
        return None
    if int(numpy_version.split(".")[0]) >= 2 and (major, minor) <= (2, 14):
        return (
            f"tflite-runtime {tflite_version} was built for numpy 1.x and cannot load models "
            f"with numpy {numpy_version}"
        )
    return None


_FIX_HINT = "install ai-edge-litert (pip install ai-edge-litert), or pin numpy<2 for tflite-runtime"


class LiteRtRuntime(Runtime):
    """TFLite models through LiteRT's Interpreter (or tflite-runtime's)."""

    name = "litert"

    @classmethod
    def import_module(cls):
        errors = []
        for name in _MODULES:
            try:
                module = importlib.import_module(name)
            except Exception as e:  # an ABI mismatch raises ImportError, AttributeError or worse
                errors.append((name, e))
                continue
            if name.startswith("tflite_runtime"):
                version = _tflite_runtime_version()
                problem = tflite_runtime_numpy_problem(version, np.__version__)
                if problem:
                    raise RuntimeUnavailable(problem, hint=_FIX_HINT)
            return module
        if any(
            n.startswith("tflite_runtime") and not isinstance(e, ModuleNotFoundError)
            for n, e in errors
        ):
            name, e = errors[-1]
            if _numpy_major() >= 2:
                raise RuntimeUnavailable(
                    f"tflite-runtime cannot be imported with numpy {np.__version__} "
                    f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})",
                    hint=_FIX_HINT,
                ) from e
        raise RuntimeUnavailable(
            "no LiteRT runtime installed (neither ai_edge_litert nor tflite_runtime)",
            hint="pip install 'edgequal[litert]'",
        )

    @classmethod
    def module_name(cls) -> str:
        """Which package provides the interpreter: ai_edge_litert or tflite_runtime."""
        return cls.import_module().__name__.split(".")[0]

    @classmethod
    def version(cls) -> str:
        module = cls.import_module().__name__.split(".")[0]
        if module == "tflite_runtime":
            return f"tflite-runtime {_tflite_runtime_version()}"
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("ai-edge-litert")
        except PackageNotFoundError:
            return "unknown"

    def _resolver(self):
        """The interpreter's op resolver: the options' ``op_resolver``, else from ``xnnpack``."""
        module = self.import_module()
        name = self.options.op_resolver or ("auto" if self.options.xnnpack else _NO_DELEGATES)
        if name not in OP_RESOLVERS:
            from edgequal.contract.errors import BadInput

            raise BadInput(f"unknown LiteRT op resolver '{name}'", hint=", ".join(OP_RESOLVERS))
        return getattr(module.OpResolverType, OP_RESOLVERS[name])

    def _interpreter(self, model_path: Path, preserve: bool = False):
        module = self.import_module()
        kwargs = {"experimental_preserve_all_tensors": True} if preserve else {}
        with _runtime_info_silenced():
            interp = module.Interpreter(
                model_path=str(model_path),
                num_threads=self.options.threads,
                experimental_op_resolver_type=self._resolver(),
                **kwargs,
            )
            interp.allocate_tensors()
        return interp

    def _load_impl(self, model_path: Path) -> None:
        self._model_path = model_path
        self._resolver()  # an unknown resolver is bad input, not a rejected model
        try:
            self._interp = self._interpreter(model_path)
        except Exception as e:
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            err = ModelRejected(f"LiteRT {self.version()} rejected the model: {message}")
            err.operator = _unsupported_tflite_op(str(e))
            raise err from e
        self._input_index = {d["name"]: d["index"] for d in self._interp.get_input_details()}
        self._output_index = {d["name"]: d["index"] for d in self._interp.get_output_details()}
        self._allocated_shapes: dict[str, tuple] = {}

    def _describe_impl(self, inputs: bool) -> list[TensorSpec]:
        details = self._interp.get_input_details() if inputs else self._interp.get_output_details()
        specs = []
        for d in details:
            signature = d.get("shape_signature", d["shape"])
            shape = [int(s) if s >= 0 else None for s in signature]
            scale, zero_point = d.get("quantization", (0.0, 0))
            quant = {"scale": float(scale), "zero_point": int(zero_point)} if scale else None
            specs.append(TensorSpec(d["name"], np.dtype(d["dtype"]).name, shape, quant))
        return specs

    def _set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        resized = False
        for name, array in feeds.items():
            if self._allocated_shapes.get(name) != array.shape:
                self._interp.resize_tensor_input(self._input_index[name], list(array.shape))
                self._allocated_shapes[name] = array.shape
                resized = True
        if resized:
            self._interp.allocate_tensors()
        for name, array in feeds.items():
            self._interp.set_tensor(self._input_index[name], np.ascontiguousarray(array))

    def _run_impl(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._set_inputs(feeds)
        self._interp.invoke()
        return {name: self._interp.get_tensor(i).copy() for name, i in self._output_index.items()}

    def _bind_impl(self, feeds: dict[str, np.ndarray]) -> Callable[[], object]:
        # Inputs stay in the interpreter's tensors between invokes, as benchmark_model does.
        self._set_inputs(feeds)
        return self._interp.invoke

    def _bound_outputs_impl(self, returned: object) -> dict[str, np.ndarray]:
        # invoke() returns nothing: the outputs are in the interpreter's tensors until the next.
        return {name: self._interp.get_tensor(i).copy() for name, i in self._output_index.items()}

    def _describe_runtime_impl(self) -> dict:
        resolver = self.options.op_resolver or ("auto" if self.options.xnnpack else _NO_DELEGATES)
        return {
            "module": self.module_name(),
            "threads": self.options.threads,
            "delegates": ["XNNPACK"] if resolver in ("auto", "builtin") else [],
            "op_resolver": resolver,
        }

    def _tensor_nodes_impl(self) -> list[dict]:
        names = {int(d["index"]): str(d["name"]) for d in self._interp.get_tensor_details()}
        return [
            {
                "name": "",
                "op_type": node["op_name"],
                "inputs": [names.get(i, "") for i in node["inputs"] if i >= 0],
                "outputs": [names.get(i, "") for i in node["outputs"] if i >= 0],
            }
            for node in self._graph_nodes_impl()
            if node["op_name"] != "DELEGATE"
        ]

    def _run_keeping_impl(self, feeds: dict[str, np.ndarray], names: list[str]) -> dict:
        # experimental_preserve_all_tensors keeps every tensor the interpreter computes; a
        # tensor inside a delegate's partition is never computed, so it is not returned.
        from ..measure.operators import delegated_nodes

        interp = self._interpreter(self._model_path, preserve=True)
        shapes = {int(d["index"]): tuple(d["shape"]) for d in interp.get_input_details()}
        resize = [n for n, a in feeds.items() if shapes[self._input_index[n]] != a.shape]
        for name in resize:
            interp.resize_tensor_input(self._input_index[name], list(feeds[name].shape))
        if resize:
            interp.allocate_tensors()
        for name, array in feeds.items():
            interp.set_tensor(self._input_index[name], np.ascontiguousarray(array))
        interp.invoke()
        ops = [
            {
                "index": int(d["index"]),
                "op_name": str(d["op_name"]),
                "inputs": [int(i) for i in d["inputs"]],
                "outputs": [int(i) for i in d["outputs"]],
            }
            for d in interp._get_ops_details()
        ]
        taken = delegated_nodes(ops)
        hidden = {t for o in ops if o["index"] in taken for t in o["outputs"]}
        hidden -= {t for o in ops if o["op_name"] == "DELEGATE" for t in o["outputs"]}
        index = {str(d["name"]): int(d["index"]) for d in interp.get_tensor_details()}
        wanted = set(names) | set(self._output_index)
        return {
            name: interp.get_tensor(i).copy()
            for name, i in index.items()
            if name in wanted and i not in hidden
        }

    def _kept_tensor_bytes_impl(self, names: list[str]) -> dict[str, int]:
        wanted = set(names)
        return {
            str(d["name"]): int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
            for d in self._interp.get_tensor_details()
            if d["name"] in wanted
        }

    def _graph_nodes_impl(self) -> list[dict]:
        # The interpreter lists the model's nodes, then one DELEGATE node per partition
        # a delegate took (measure/operators.delegate_coverage reads it).
        return [
            {
                "index": int(d["index"]),
                "op_name": str(d["op_name"]),
                "inputs": [int(i) for i in d["inputs"]],
                "outputs": [int(i) for i in d["outputs"]],
            }
            for d in self._interp._get_ops_details()
        ]

    def _close_impl(self) -> None:
        self._interp = None


# LiteRT's C++ minimal logger writes "INFO: Created TensorFlow Lite XNNPACK delegate for
# CPU." straight to file descriptor 2 when an interpreter is created; it honours no
# environment variable (TF_CPP_MIN_LOG_LEVEL governs TensorFlow's other logger, not this
# one) and its severity setter is not in the Python API.
_RUNTIME_INFO = re.compile(rb"^INFO: [^\n]*\n?", re.MULTILINE)
# fd 2 is the process's: two threads redirecting it at once would restore each other's
# temporary file (the server scenario loads one interpreter per caller thread).
_FD2_LOCK = threading.Lock()


@contextmanager
def _runtime_info_silenced() -> Iterator[None]:
    """Hold back the runtime's ``INFO:`` lines written to fd 2 inside the block.

    Everything else written to fd 2 meanwhile (a ``WARNING:`` or ``ERROR:`` of the runtime,
    another thread's line) is written back to it when the block ends, errors included, so
    a real failure's message still reaches the user, only later by the block's length
    (an interpreter's creation: milliseconds).
    """
    with _FD2_LOCK:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):  # no fd 2 to redirect: leave it as it is
            saved = None
        if saved is None:
            yield
            return
        with _held_fd2(saved):
            yield


@contextmanager
def _held_fd2(saved: int) -> Iterator[None]:
    """Point fd 2 at a temporary file; at the end back at ``saved``, then write the held
    text there less the runtime's ``INFO:`` lines."""
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except ValueError:
                pass
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            rest = _RUNTIME_INFO.sub(b"", held.read())
            while rest:
                rest = rest[os.write(2, rest) :]


def _tflite_runtime_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tflite-runtime")
    except PackageNotFoundError:
        return "unknown"


def _unsupported_tflite_op(message: str) -> str | None:
    """The op a LiteRT load error names ("Encountered unresolved custom op: X")."""
    m = re.search(r"unresolved custom op: ([\w.]+)", message) or re.search(
        r"Didn't find op for builtin opcode '(\w+)'", message
    )
    return m.group(1) if m else None
