"""The one small interface every runtime adapter implements.

The base class owns the checks every runtime needs (input names, dtypes and
shapes against the model); a concrete adapter fills the ``_impl`` hooks only.
Measurement code holds a ``Runtime`` and never names a concrete one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from edgequal.contract.tensors import TensorSpec, check_feeds


@dataclass
class RuntimeOptions:
    """What the caller asks of a runtime. ``threads=None`` leaves the runtime's default."""

    threads: int | None = None
    providers: list[str] | None = None  # onnxruntime execution providers, in priority order
    graph_optimization: str = "all"  # onnxruntime: disabled | basic | extended | all
    xnnpack: bool = True  # LiteRT: the default XNNPACK delegate
    # LiteRT: the op resolver (auto | builtin | builtin-ref | builtin-no-delegates); None
    # follows ``xnnpack`` (auto, or builtin without the default delegates).
    op_resolver: str | None = None
    extra: dict = field(default_factory=dict)


class Runtime(ABC):
    """Load a model, describe its tensors, run it, close it."""

    name: str = "runtime"
    # Whether one loaded model may be run from several threads at once (the server
    # scenario's callers share it); else each caller loads its own.
    concurrent_calls: bool = False

    def __init__(self, options: RuntimeOptions | None = None):
        self.options = options or RuntimeOptions()
        self._inputs: list[TensorSpec] = []
        self._outputs: list[TensorSpec] = []

    @classmethod
    @abstractmethod
    def import_module(cls):
        """Import the runtime's Python module (timed separately as 'runtime import')."""

    @classmethod
    @abstractmethod
    def version(cls) -> str:
        """The runtime's version string."""

    def load(self, model_path: Path) -> None:
        """Create the session or interpreter. Raises ModelRejected with the cause."""
        self._load_impl(Path(model_path))
        self._inputs = self._describe_impl(inputs=True)
        self._outputs = self._describe_impl(inputs=False)

    def inputs(self) -> list[TensorSpec]:
        """The model's inputs."""
        return list(self._inputs)

    def outputs(self) -> list[TensorSpec]:
        """The model's outputs."""
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on checked inputs; returns outputs by name."""
        check_feeds(self._inputs, feeds)
        return self._run_impl(dict(feeds))

    def bind(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """A zero-argument callable that runs once on these inputs: the body of a timing loop.

        Inputs are set up once here so the call does no more than the runtime's own
        run/invoke; its return value is not meant to be read.
        """
        check_feeds(self._inputs, feeds)
        return self._bind_impl(dict(feeds))

    def bound_outputs(self, returned: object) -> dict[str, np.ndarray]:
        """The outputs of the bound call that returned ``returned``, by name, read after the
        call (outside its timed span): the arrays to keep when the timed outputs are checked.

        Call it before the next bound call: a runtime whose outputs live in its own
        buffers (LiteRT) returns copies of them as they are now.
        """
        return self._bound_outputs_impl(returned)

    @classmethod
    def available_providers(cls) -> list[str] | None:
        """Execution providers this installation offers (None: the runtime has no such notion)."""
        return None

    def node_timings(self, feeds: Mapping[str, np.ndarray], runs: int) -> list[dict] | None:
        """Per-node kernel runs over ``runs`` inferences from the runtime's own profiler.

        Each ``{node, op_type, provider, dur_us}``; None when the runtime has no profiler.
        Profiling is done on a separate session so the timed call is never profiled.
        """
        check_feeds(self._inputs, feeds)
        return self._node_timings_impl(dict(feeds), runs)

    def graph_nodes(self) -> list[dict] | None:
        """The executed graph's nodes ``{index, op_name, inputs, outputs}`` after delegation, or None."""
        return self._graph_nodes_impl()

    def tensor_nodes(self) -> list[dict] | None:
        """The graph's nodes in the order they run, ``{name, op_type, inputs, outputs}``
        with tensor names: what :meth:`run_keeping` can keep (None: this runtime cannot)."""
        return self._tensor_nodes_impl()

    def run_keeping(
        self, feeds: Mapping[str, np.ndarray], names: list[str]
    ) -> dict[str, np.ndarray]:
        """Run once, untimed, keeping the intermediate tensors ``names`` besides the outputs
        (docs/divergence.md): on a separate session or interpreter, never the timed one. A
        tensor the runtime did not compute (inside a delegate's partition) is left out."""
        check_feeds(self._inputs, feeds)
        return self._run_keeping_impl(dict(feeds), list(names))

    def kept_tensor_bytes(self, names: list[str]) -> dict[str, int]:
        """Each tensor's size in bytes as the model declares it (dynamic dims count as 1):
        what keeping it costs, to split the graph into ranges that fit the memory."""
        return self._kept_tensor_bytes_impl(list(names))

    def describe(self) -> dict:
        """Runtime name, version, threads, and providers or delegates actually in use."""
        return {"runtime": self.name, "version": self.version(), **self._describe_runtime_impl()}

    def close(self) -> None:
        """Release the session; the default drops references."""
        self._close_impl()

    @abstractmethod
    def _load_impl(self, model_path: Path) -> None: ...

    @abstractmethod
    def _describe_impl(self, inputs: bool) -> list[TensorSpec]: ...

    @abstractmethod
    def _run_impl(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def _bind_impl(self, feeds: dict[str, np.ndarray]) -> Callable[[], object]: ...

    @abstractmethod
    def _describe_runtime_impl(self) -> dict: ...

    @abstractmethod
    def _bound_outputs_impl(self, returned: object) -> dict[str, np.ndarray]: ...

    def _close_impl(self) -> None:
        pass

    def _node_timings_impl(self, feeds: dict[str, np.ndarray], runs: int) -> list[dict] | None:
        return None

    def _graph_nodes_impl(self) -> list[dict] | None:
        return None

    def _tensor_nodes_impl(self) -> list[dict] | None:
        return None

    def _run_keeping_impl(self, feeds: dict[str, np.ndarray], names: list[str]) -> dict:
        from edgequal.contract.errors import BadInput

        raise BadInput(f"{self.name} cannot keep intermediate tensors")

    def _kept_tensor_bytes_impl(self, names: list[str]) -> dict[str, int]:
        return {}
