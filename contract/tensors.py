"""A model's inputs and outputs as both sides describe them, and the check of arrays against them.

The golden set, the input contract and the runtime adapters share one ``TensorSpec``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from .errors import GoldenMismatch


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
