"""onnxruntime adapter: execution providers, intra-op threads, graph optimization level."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from edgequal.contract.errors import BadInput, ModelRejected
from edgequal.contract.tensors import TensorSpec

from .base import Runtime

_ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
}

_OPT_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}

# onnxruntime names the operator it cannot resolve in one of these shapes.
_UNSUPPORTED_PATTERNS = [
    re.compile(r"([\w.]*:?\w+)\(-?\d+\) is not a registered function/op"),
    re.compile(r"Could not find an implementation for (\w+)\(\d+\)"),
    re.compile(r"No Op registered for (\w+) with domain_version"),
    re.compile(r"Unrecognized attribute: .* for operator (\w+)"),
]


def unsupported_operator(message: str) -> str | None:
    """The operator an onnxruntime load error names, if it names one."""
    for pattern in _UNSUPPORTED_PATTERNS:
        m = pattern.search(message)
        if m:
            return m.group(1)
    return None


def clean_ort_message(error: Exception) -> str:
    """onnxruntime's first error line without its status prefix and file path."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    line = text.splitlines()[0]
    line = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    line = re.sub(r"^Load model from .* failed:\s*", "", line)
    return line.removeprefix("Fatal error: ").strip() or type(error).__name__


class OnnxRuntime(Runtime):
    """ONNX models through onnxruntime's InferenceSession."""

    name = "onnxruntime"
    concurrent_calls = True  # InferenceSession.run is thread-safe

    @classmethod
    def import_module(cls):
        import onnxruntime

        return onnxruntime

    @classmethod
    def version(cls) -> str:
        return cls.import_module().__version__

    @classmethod
    def available_providers(cls) -> list[str]:
        return list(cls.import_module().get_available_providers())

    def _session_options(self):
        ort = self.import_module()
        so = ort.SessionOptions()
        if self.options.threads:
            so.intra_op_num_threads = self.options.threads
            so.inter_op_num_threads = 1
        level = self.options.graph_optimization
        if level not in _OPT_LEVELS:
            raise BadInput(
                f"unknown graph optimization level '{level}'", hint=", ".join(_OPT_LEVELS)
            )
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[level])
        so.log_severity_level = 3
        return so

    def _load_impl(self, model_path: Path) -> None:
        ort = self.import_module()
        so = self._session_options()
        available = ort.get_available_providers()
        providers = self.options.providers or ["CPUExecutionProvider"]
        missing = [p for p in providers if p not in available]
        if missing:
            raise ModelRejected(
                f"execution provider {missing[0]} is not available in onnxruntime {ort.__version__}",
                hint=f"available: {', '.join(available)}",
            )
        try:
            self._session = ort.InferenceSession(
                str(model_path), sess_options=so, providers=providers
            )
        except Exception as e:  # onnxruntime raises several unrelated exception types
            err = ModelRejected(
                f"onnxruntime {ort.__version__} rejected the model: {clean_ort_message(e)}"
            )
            err.operator = unsupported_operator(str(e))
            raise err from e
        self._requested_providers = providers
        self._model_path = model_path

    def _describe_impl(self, inputs: bool) -> list[TensorSpec]:
        args = self._session.get_inputs() if inputs else self._session.get_outputs()
        specs = []
        for a in args:
            shape = [d if isinstance(d, int) else (d or None) for d in (a.shape or [])]
            specs.append(TensorSpec(a.name, _ORT_DTYPES.get(a.type, a.type), shape))
        return specs

    def _run_impl(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self._outputs]
        return dict(zip(names, self._session.run(names, feeds)))

    def _bind_impl(self, feeds: dict[str, np.ndarray]) -> Callable[[], object]:
        run = self._session.run
        return lambda: run(None, feeds)

    def _bound_outputs_impl(self, returned: object) -> dict[str, np.ndarray]:
        # run(None, ...) returns fresh arrays in the order of the session's outputs.
        return dict(zip((o.name for o in self._outputs), returned))

    def _describe_runtime_impl(self) -> dict:
        return {
            "providers_requested": self._requested_providers,
            "providers": self._session.get_providers(),
            "threads": self.options.threads,
            "graph_optimization": self.options.graph_optimization,
        }

    def _node_timings_impl(self, feeds: dict[str, np.ndarray], runs: int) -> list[dict]:
        import json
        import tempfile

        from ..measure.operators import node_events

        with tempfile.TemporaryDirectory(prefix="edgequal-profile-") as tmp:
            so = self._session_options()
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / "ort")
            session = self.import_module().InferenceSession(
                str(self._model_path), sess_options=so, providers=self._requested_providers
            )
            for _ in range(runs + 1):  # the first run allocates: node_events drops it
                session.run(None, feeds)
            trace = json.loads(Path(session.end_profiling()).read_text())
        return node_events(trace, skip_runs=1)

    def _model_bytes(self) -> bytes:
        return Path(self._model_path).read_bytes()

    def _tensor_nodes_impl(self) -> list[dict] | None:
        from .onnx_graph import graph_nodes

        return graph_nodes(self._model_bytes())

    def _keeping_session(self, names: list[str]):
        """A session whose outputs are the model's and ``names`` (built from the model's
        bytes with those outputs marked; next to the model when it has external data, whose
        locations are relative to its directory)."""
        import os
        import tempfile

        from edgequal.contract.onnx_external_data import external_data_refs

        from .onnx_graph import graph_initializer_names, graph_output_names, with_graph_outputs

        data = self._model_bytes()
        # Weights are not intermediate values: only what the nodes compute is marked.
        skip = set(graph_output_names(data)) | graph_initializer_names(data)
        marked = with_graph_outputs(data, [n for n in names if n not in skip])
        ort = self.import_module()
        so = self._session_options()
        if not external_data_refs(data):
            return ort.InferenceSession(
                marked, sess_options=so, providers=self._requested_providers
            )
        fd, tmp = tempfile.mkstemp(
            prefix=".edgequal-kept-", suffix=".onnx", dir=Path(self._model_path).parent
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(marked)
            return ort.InferenceSession(tmp, sess_options=so, providers=self._requested_providers)
        finally:
            os.unlink(tmp)

    def _run_keeping_impl(self, feeds: dict[str, np.ndarray], names: list[str]) -> dict:
        session = self._keeping_session(names)
        wanted = [o.name for o in session.get_outputs()]
        return dict(zip(wanted, session.run(wanted, feeds)))

    def _kept_tensor_bytes_impl(self, names: list[str]) -> dict[str, int]:
        session = self._keeping_session(names)
        sizes = {}
        for o in session.get_outputs():
            dtype = np.dtype(_ORT_DTYPES.get(o.type, "float32"))
            count = 1
            for d in o.shape or []:
                count *= d if isinstance(d, int) and d > 0 else 1
            sizes[o.name] = count * dtype.itemsize
        return sizes

    def _close_impl(self) -> None:
        self._session = None
