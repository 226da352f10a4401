"""The one small interface every runtime adapter implements.

The base class owns the checks every runtime needs (input names, dtypes and
shapes against the model); a concrete adapter fills the ``_impl`` hooks only.
Measurement code holds a ``Runtime`` and never names a concrete one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from edgequal.contract.errors import GoldenMismatch


@dataclass
class TensorSpec:
    """A model input or output: name, numpy dtype name, shape (int, or str/None for a dynamic dim)."""

    name: str
    dtype: str
    shape: list[int | str | None]
    quantization: dict | None = None  # {"scale": float, "zero_point": int} for quantized tensors

    @property
    def is_dynamic(self) -> bool:
        """True when any dimension is unknown until run time."""
        return any(not isinstance(d, int) or d < 0 for d in self.shape)

    def describe(self) -> str:
        """``float32 [1,3,224,224]`` with dynamic dims by name, as shown in error messages."""
        dims = ",".join(str(d) if d is not None else "?" for d in self.shape)
        return f"{self.dtype} [{dims}]"

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> TensorSpec:
        """Inverse of ``to_dict``."""
        return cls(d["name"], d["dtype"], list(d["shape"]), d.get("quantization"))


def shape_fits(spec: TensorSpec, shape: tuple[int, ...]) -> bool:
    """Whether a concrete array shape fits a spec whose dynamic dims match anything."""
    if len(spec.shape) != len(shape):
        return False
    return all(not isinstance(d, int) or d < 0 or d == s for d, s in zip(spec.shape, shape))


def describe_array(a: np.ndarray) -> str:
    """``float64 [1,3,32,32]``, the counterpart of ``TensorSpec.describe``."""
    return f"{a.dtype} [{','.join(str(s) for s in a.shape)}]"


def shape_key(feeds: Mapping[str, np.ndarray]) -> str:
    """``image=1x3x32x32;scale=scalar``: the name latency results are grouped under."""
    return ";".join(
        f"{name}={'x'.join(str(d) for d in a.shape) or 'scalar'}"
        for name, a in sorted(feeds.items())
    )


def check_feeds(
    specs: list[TensorSpec], feeds: Mapping[str, np.ndarray], where: str = "input"
) -> None:
    """Raise GoldenMismatch naming the input, what the model expects and what was given."""
    names = {s.name for s in specs}
    for spec in specs:
        if spec.name not in feeds:
            have = ", ".join(sorted(feeds)) or "nothing"
            raise GoldenMismatch(
                f"{where} '{spec.name}' is missing: model expects {spec.describe()}, file holds {have}"
            )
        a = feeds[spec.name]
        if str(a.dtype) != spec.dtype or not shape_fits(spec, a.shape):
            raise GoldenMismatch(
                f"{where} '{spec.name}': model expects {spec.describe()}, file holds {describe_array(a)}"
            )
    extra = sorted(set(feeds) - names)
    if extra:
        raise GoldenMismatch(
            f"{where} '{extra[0]}' is not an input of the model (inputs: {', '.join(sorted(names))})"
        )


@dataclass
class RuntimeOptions:
    """What the caller asks of a runtime. ``threads=None`` leaves the runtime's default."""

    threads: int | None = None
    providers: list[str] | None = None  # onnxruntime execution providers, in priority order
    graph_optimization: str = "all"  # onnxruntime: disabled | basic | extended | all
    xnnpack: bool = True  # LiteRT: the default XNNPACK delegate
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

    def _close_impl(self) -> None:
        pass

    def _node_timings_impl(self, feeds: dict[str, np.ndarray], runs: int) -> list[dict] | None:
        return None

    def _graph_nodes_impl(self) -> list[dict] | None:
        return None
